"""`wmx.cli.dispatch`: a reader that closes the output early ends the command quietly."""
import subprocess
import sys

PROG = """
import sys
from wmx.cli.dispatch import dispatch
def talk(args):
    for _ in range(200_000):
        print("a line of a long listing")
    return 0
sys.exit(dispatch({"talk": talk}, "talk", None))
"""


def test_a_closed_pipe_ends_the_command_quietly_with_141():
    p = subprocess.Popen([sys.executable, "-c", PROG], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout.read(64).startswith(b"a line")       # `| head`: read a little, close
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and err == ""      # no "error: Broken pipe", no trace
