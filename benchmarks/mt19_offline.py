"""mt19_offline: carry a pooled dataset to the device machine in parts, train an offline run
on it there in pieces, one call each, and bring the run's small files back.

The device machine's only inbound channel is the folder a call carries (at most ~50 MiB
a call, replaced on each call; its /tmp persists while the machine is warm), and a full
mt19 dataset is ~165 MB. So the dataset travels as an uncompressed tar stream cut into
parts over several calls, gathered on the device in a staging folder that outlives the
calls, and is stored there only when every part has come, all verified. A call runs at
most 10 minutes, so the run trains in pieces, each resuming the checkpoint the last one
left on the (still warm) machine; only the run's small files come back. In order:

    python benchmarks/mt19_offline.py pack mt19-7cff6d2d@3347c2b9ee69 --out DIR   # here
    # each call, on the device (the carried folder, then a piece of the run):
    python benchmarks/mt19_offline.py unpack CARRIED --home H
    python benchmarks/mt19_offline.py train mt19-7cff6d2d@3347c2b9ee69 --home H \\
        --run-name R --updates 100000 --eval-every 50000 --budget-s 480 --out $OUT \\
        -- --seeds 0 1 2 --skip-validation
    python benchmarks/mt19_offline.py ingest R.call01.tar.gz --home ~/.wmx        # here

``pack`` resolves the name as the store does (``name@<8+ hex digits>``, ``name@latest``
or the dataset's folder) and writes ``DIR/<name>@<hash12>.tar.part00``, ``.part01``, ...
(each at most ``--part-mib``) and ``DIR/<name>@<hash12>.parts.json`` (the dataset's name
and content hash, every part's size and sha256, the total), then prints the carry plan:
which parts go in which call, the first call having ``--first-call-mib`` of room beside
the other things it carries, later ones ``--call-mib``. For each call, copy the parts the
plan names and the parts.json (a few hundred bytes) into the folder that call carries.

``unpack`` copies the parts and parts.json files it finds in DIR into the staging folder
(``--stage``, default ``H/.carry``), then for each dataset staged: when every part is
there with its sha256, it joins them into an owned temporary under ``H/datasets/<name>/``,
extracts, validates the dataset with `wmx.datasets.validate` (every check of
``wmx dataset validate``, the content hash recomputed and equal to the name's) and
renames it to ``H/datasets/<name>/<hash>``; the staged parts are then removed. A dataset
with parts still to come is reported (which ones) and waits, exit 0. A dataset already
stored and valid is kept. A damaged part is removed from the stage (carry it again) and
refused in one line, exit 2, with nothing stored and no temporary left
(`_mt19_offline_unpack`, which also holds the parts' names and schema).

``train`` (once the dataset is stored) runs ``train_offline --agent tdmpc2 --preset paper
--model-size 5`` (``--agent dreamerv3``: its ``paper`` preset's 12m) on it as
``H/runs/R``: new when R has no config.json, else resumed; it asks the trainer to stop
(SIGTERM, after its running chunk, with a checkpoint) early enough to exit ``--reserve-s``
before ``--budget-s``, judged from the chunks and evaluations it has seen, then writes
``OUT/R.callNN.tar.gz`` (at most 16 MiB: the run without checkpoints/, and each call's
record and log) and prints one line: updates done of the total, finished or not. Flags
after ``--`` go to train_offline (``--skip-validation``: unpack validated the dataset).
``--budget-s`` is what the call has left after unpack; a signal to the command
(``timeout``) asks the trainer to stop once. Call it again, while the machine is warm (a
fresh one has lost the checkpoint and starts R again, which ingest then refuses as another
run), until the run has finished.
``ingest`` puts the returned tarball into ``~/.wmx/runs/R`` (a later call's replaces an
earlier one's; an earlier, damaged or foreign one is refused, exit 2, nothing written)
and, once the run has finished, writes its report from the trainer's final evaluation,
which ``evaluate --runs R --seeds-from-checkpoint --out DIR`` reads without the
checkpoint (`_mt19_offline_run`, `_mt19_offline_ingest`).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import _mt19_bundle as bundle_lib  # noqa: E402
from _mt19_offline_run import PAPER_MODEL_SIZE  # noqa: E402
from _mt19_offline_unpack import (MIB, PARTS_SUFFIX, SCHEMA, CarryError,  # noqa: E402
                                  base_name, cmd_unpack, is_carried_file, part_name)


# ---- pack (here) -------------------------------------------------------------------------
class _PartWriter:
    """A write-only stream cut into files of at most ``limit`` bytes in ``folder``
    (``part_name(base, i)``), each one's size and sha256 kept."""

    def __init__(self, folder: Path, base: str, limit: int):
        self.folder, self.base, self.limit = folder, base, limit
        self.parts: list[dict[str, Any]] = []
        self._f = self._h = None
        self._n = 0

    def _roll(self) -> None:
        self._close_part()
        name = part_name(self.base, len(self.parts))
        self._f, self._h, self._n = (self.folder / name).open("wb"), hashlib.sha256(), 0
        self.parts.append({"name": name})

    def _close_part(self) -> None:
        if self._f is not None:
            self._f.close()
            self.parts[-1].update(size_bytes=self._n, sha256=self._h.hexdigest())
            self._f = None

    def write(self, data) -> int:
        mv = memoryview(data).cast("B")
        while len(mv):
            if self._f is None or self._n == self.limit:
                self._roll()
            k = min(len(mv), self.limit - self._n)
            self._f.write(mv[:k])
            self._h.update(mv[:k])
            self._n += k
            mv = mv[k:]
        return len(data)

    def close(self) -> None:
        self._close_part()


def dataset_files(path: Path) -> tuple[str, str, list[Path]]:
    """(name, content hash, files) of a stored dataset: manifest.json and the shards its
    manifest lists, each present with the size the manifest gives.

    Raises:
        CarryError: a shard is missing or of another size.
    """
    raw = bundle_lib.read_json(path / "manifest.json")
    name, h = raw.get("name"), raw.get("content_hash")
    files = [path / "manifest.json"]
    for s in raw.get("shards", []):
        p = path / s["name"]
        if not p.is_file() or p.stat().st_size != s.get("size_bytes"):
            raise CarryError(f"{base_name(name, h)}: shard {s['name']} is missing or not the "
                             f"size its manifest gives ({path}); `wmx dataset validate` it "
                             "and rebuild it")
        files.append(p)
    return name, h, files


def _old_parts(out: Path, base: str) -> list[Path]:
    """The parts and parts.json files in ``out``; CarryError when one is another
    dataset's."""
    found = [p for p in out.iterdir() if p.is_file() and is_carried_file(p.name)]
    other = sorted({p.name.split(".tar.part")[0].removesuffix(PARTS_SUFFIX)
                    for p in found} - {base})
    if other:
        raise CarryError(f"{out} already holds the parts of {', '.join(other)}; give an "
                         "empty --out folder (or remove them)")
    return found


def pack(path: Path, out: Path, part_bytes: int) -> dict[str, Any]:
    """Write a stored dataset's parts and parts.json into ``out`` (see the module doc).

    The parts are written into an owned temporary in ``out`` and renamed into place,
    then the parts.json last; parts of the same dataset packed before are replaced.

    Args:
        path: the dataset's folder (``<home>/datasets/<name>/<hash>``).
        out: the folder written (created).
        part_bytes: the largest part.

    Returns:
        The parts.json's content.

    Raises:
        CarryError: ``out`` holds another dataset's parts, or a shard is missing.
    """
    from wmx import temporaries
    from wmx.runs.host import write_json_atomic
    name, h, files = dataset_files(path)
    base = base_name(name, h)
    out.mkdir(parents=True, exist_ok=True)
    temporaries.sweep(out)
    old = _old_parts(out, base)
    tmp = temporaries.make_dir(out, "mt19-offline-pack")
    try:
        w = _PartWriter(tmp, base, part_bytes)
        with tarfile.open(fileobj=w, mode="w|", format=tarfile.PAX_FORMAT) as tf:
            for f in files:
                info = tf.gettarinfo(str(f), arcname=f"{name}/{h}/{f.name}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.mode = 0o644
                with f.open("rb") as src:
                    tf.addfile(info, src)
        w.close()
        for p in old:
            p.unlink()
        for part in w.parts:
            os.replace(tmp / part["name"], out / part["name"])
        doc = {"schema": SCHEMA, "name": name, "content_hash": h,
               "files": [{"name": f.name, "size_bytes": f.stat().st_size} for f in files],
               "parts": w.parts, "total_bytes": sum(p["size_bytes"] for p in w.parts),
               "unpack": "python benchmarks/mt19_offline.py unpack DIR --home H"}
        write_json_atomic(out / (base + PARTS_SUFFIX), doc)
    finally:
        temporaries.remove(tmp)
    return doc


def carry_plan(sizes: list[int], first_room: int, call_room: int) -> list[list[int]]:
    """The parts (indices) each call carries, in order: as many whole parts as fit in the
    call's room (the first call's ``first_room``, later calls' ``call_room``).

    Raises:
        CarryError: a part is larger than ``call_room``.
    """
    if any(s > call_room for s in sizes):
        raise CarryError(f"a part of {max(sizes) / MIB:.2f} MiB does not fit a call's "
                         f"{call_room / MIB:.2f} MiB; give a smaller --part-mib")
    calls: list[list[int]] = [[]]
    room = first_room
    for i, s in enumerate(sizes):
        if s > room:
            calls.append([])
            room = call_room
        calls[-1].append(i)
        room -= s
    return calls


def cmd_pack(args) -> int:
    """Resolve the dataset, write its parts and parts.json, print the carry plan."""
    from wmx.datasets.store import Store
    if not 0 < args.part_mib <= args.call_mib:
        raise CarryError(f"--part-mib {args.part_mib} must be above 0 and at most --call-mib "
                         f"{args.call_mib} (a part travels whole in one call)")
    store = Store(args.home)
    try:
        path = store.resolve_dataset(args.ref)
    except FileNotFoundError as e:
        raise CarryError(f"{e}; give name@<hash prefix> of a stored dataset") from None
    except ValueError as e:
        raise CarryError(f"{str(e).splitlines()[0]} (in {store.home}; `wmx dataset ls "
                         "--home H` lists them)") from None
    out = Path(args.out)
    doc = pack(path, out, max(1, int(args.part_mib * MIB)))
    base = base_name(doc["name"], doc["content_hash"])
    sizes = [p["size_bytes"] for p in doc["parts"]]
    calls = carry_plan(sizes, int(args.first_call_mib * MIB), int(args.call_mib * MIB))
    print(f"{base}: {len(sizes)} part(s), {doc['total_bytes'] / MIB:.2f} MiB, in {out} "
          f"(and {base}{PARTS_SUFFIX})")
    print(f"carries: {len(calls)} call(s) ({args.first_call_mib:g} MiB of room in the first, "
          f"{args.call_mib:g} MiB in the others), each with the parts.json:")
    for k, idx in enumerate(calls, 1):
        what = (f"part{idx[0]:02d}" + (f"..part{idx[-1]:02d}" if len(idx) > 1 else "")
                if idx else "none (no part fits beside the other things)")
        print(f"  call {k}: {what} ({sum(sizes[i] for i in idx) / MIB:.2f} MiB)")
    if not calls[0] and args.first_call_mib > 0:
        print(f"  (a --part-mib of at most {args.first_call_mib:g} lets the first call carry "
              "a part)")
    print("then on the device, each call: python benchmarks/mt19_offline.py unpack "
          "<the carried folder> --home H")
    return 0



# ---- command line ------------------------------------------------------------------------
SUBCOMMANDS = (
    ("pack", "here: a stored dataset -> parts + parts.json, the plan",
     "Write a stored dataset as a tar stream cut into parts (<name>@<hash12>.tar.partNN, each "
     "at most --part-mib) and <name>@<hash12>.parts.json (sizes, sha256) into --out, and "
     "print which parts each call carries."),
    ("unpack", "there: carried parts -> stage -> a stored dataset",
     "Copy the parts and parts.json files in DIR into the stage, and store each dataset whose "
     "parts are all there (sha256 checked, validated as `wmx dataset validate`, renamed into "
     "H/datasets/<name>/<hash>); report the parts still missing."),
    ("train", "there: one piece of the run within the budget -> OUT/R.callNN.tar.gz",
     "Train H/runs/R with train_offline (new, or resumed from its checkpoint) until it "
     "finishes or the budget comes near: SIGTERM early enough that it exits --reserve-s "
     "before --budget-s with a checkpoint; then pack the run's small files (no checkpoint) "
     "and the calls' records into one tarball in --out and print the updates done. Flags "
     "after -- go to train_offline."),
    ("ingest", "here: returned tarballs -> H/runs/R (and its report once finished)",
     "Put each tarball a train call returned into H/runs/R, replacing an earlier call's; "
     "refuse an earlier call's, a damaged one or another run of the same name. A finished "
     "run gets report/ from the trainer's final evaluation (evaluate --runs R "
     "--seeds-from-checkpoint reads it)."))
"""(name, help, description) of each subcommand."""


def build_parser() -> argparse.ArgumentParser:
    """The command line: pack, unpack, train, ingest."""
    from wmx.runs.cli_common import ArgumentParser, HelpFormatter, count, run_name
    p = ArgumentParser(prog="mt19_offline.py", description=__doc__.split("\n\n")[0],
                       formatter_class=HelpFormatter,
                       epilog="Workflow: pack here; carry the parts in the calls the plan "
                              "prints, each call running unpack on the carried folder, then "
                              "train; ingest each call's tarball here.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{pack,unpack,train,ingest}")
    pk, up, tr, ig = (sub.add_parser(name, help=short, description=long,
                                     formatter_class=HelpFormatter)
                      for name, short, long in SUBCOMMANDS)
    pk.add_argument("ref", metavar="NAME@HASH", help="the dataset: name@<8+ hex digits of its "
                    "content hash>, name@latest, or its folder")
    pk.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    pk.add_argument("--out", required=True, help="folder the parts go to (holding no other "
                    "dataset's parts)")
    pk.add_argument("--part-mib", type=float, default=50.0, help="largest part, MiB")
    pk.add_argument("--first-call-mib", type=float, default=12.0,
                    help="room for parts in the first call, beside the other things it "
                         "carries, MiB")
    pk.add_argument("--call-mib", type=float, default=50.0, help="room of a later call, MiB")
    up.add_argument("dir", metavar="DIR", help="the folder this call carried")
    up.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    up.add_argument("--stage", default=None, help="folder the parts gather in between calls "
                    "(default H/.carry)")
    tr.add_argument("ref", metavar="NAME@HASH", help="the stored dataset (as train_offline "
                    "--dataset takes it)")
    tr.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    tr.add_argument("--run-name", required=True, type=run_name,
                    help="the run: H/runs/<run-name>, started when it has no config.json")
    tr.add_argument("--updates", required=True, type=count, help="the run's gradient updates")
    tr.add_argument("--budget-s", required=True, type=float,
                    help="seconds this command may take, from its start to its exit")
    tr.add_argument("--out", required=True, help="folder the tarball goes to ($OUT)")
    tr.add_argument("--reserve-s", type=float, default=30.0,
                    help="seconds before the budget by which the trainer should have exited "
                         "(after its stop request: its checkpoint write, and its exit, which "
                         "waits for evaluation programs compiling in the background); at 10 s "
                         "before the budget one still running is stopped at once")
    tr.add_argument("--eval-s", type=float, default=120.0,
                    help="an evaluation's seconds, until metrics.csv shows one")
    tr.add_argument("--eval-every", type=count, default=None,
                    help="updates between evaluations (default train_offline's)")
    tr.add_argument("--batch-size", type=count, default=None,
                    help="slices (TD-MPC2) or windows (DreamerV3) per update (default "
                         "train_offline's: TD-MPC2 1024 at any preset, DreamerV3 its "
                         "preset's, 16 at paper)")
    sizes = ", ".join(f"{a} {s}" if s else f"{a} the preset's"
                      for a, s in PAPER_MODEL_SIZE.items())
    tr.add_argument("--model-size", default=None,
                    help=f"the agent's model size ('none': the preset's; default: {sizes})")
    tr.add_argument("--preset", default="paper", help="agent preset")
    tr.add_argument("--agent", default="tdmpc2", choices=sorted(PAPER_MODEL_SIZE),
                    help="agent")
    ig.add_argument("tarballs", metavar="TARGZ", nargs="+",
                    help="tarballs train calls returned, each ingested in turn (a later "
                         "call's replaces an earlier one's, not the other way round)")
    ig.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand.

    Args:
        argv: the arguments (default the command line's); for ``train``, those after
            ``--`` go to train_offline.

    Returns:
        The exit status: 0; 1 when train's trainer failed; 2 after one line on stderr per
        problem (nothing stored).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = build_parser()
    args = p.parse_args(argv)
    if extra and args.cmd != "train":
        p.error(f"flags after -- go to train's trainer; {args.cmd} takes none")
    args.extra = extra
    try:
        if args.cmd in ("train", "ingest"):
            if args.cmd == "train":
                from _mt19_offline_run import cmd_train
                return cmd_train(args)
            from _mt19_offline_ingest import cmd_ingest
            return cmd_ingest(args)
        return cmd_pack(args) if args.cmd == "pack" else cmd_unpack(args)
    except (ValueError, OSError) as e:
        print(f"mt19_offline.py {args.cmd}: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
