"""tests/benchmarks: the helper modules its test modules share get pytest's assert rewriting
(as the test modules do), so a failed check there still shows its values."""
import pytest

pytest.register_assert_rewrite("device_check_common", "profile_step_common")
