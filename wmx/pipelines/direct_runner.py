"""The runner of `--runner=direct` (the default): Beam's FnApiRunner, without the Prism attempt.

Beam's ``DirectRunner`` is ``SwitchingDirectRunner``: since Beam 2.68 it first
hands a pipeline it deems supported to the Prism runner, which fetches a Go
binary from the internet, and falls back to the FnApiRunner only when Prism
cannot start or fails on submission (Beam PR 34612, which asks users with
"unexpected breaks" to pin the FnApiRunner). A build would then run on an
untested runner on a machine with network access and on the FnApiRunner on one
without, under the same name. `FnApiDirectRunner` is that fallback taken
always: the FnApiRunner with the pipeline's options provisioned to its SDK
workers (``--direct_running_mode=multi_processing`` starts them as
subprocesses, which read their options from there), as the switching runner
builds it. ``--direct_num_workers`` and ``--direct_running_mode`` keep their
meaning; the multi_processing workers run `wmx.pipelines.sdk_worker` (Beam's worker
without its start-up lines on standard error). Imported by Beam through its dotted path
(`wmx.pipelines.runners`).
"""
from __future__ import annotations

from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle

from wmx.pipelines import sdk_worker
from wmx.pipelines.interrupt import SDK_WORKER

PATH = "wmx.pipelines.direct_runner.FnApiDirectRunner"
"""The dotted path Beam imports for `--runner=direct`."""


class FnApiDirectRunner(fn_runner.FnApiRunner):
    """Beam's FnApiRunner with the pipeline options provisioned to its workers; never Prism."""

    def run_pipeline(self, pipeline, options):
        """Run ``pipeline`` (a ``beam.Pipeline``) with ``options`` (its ``PipelineOptions``)
        on the FnApiRunner; returns its RunnerResult."""
        self._provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(
                pipeline_options=JobServiceHandle.encode_pipeline_options(
                    options.get_all_options())))
        return super().run_pipeline(pipeline, options)

    def run_via_runner_api(self, pipeline_proto, options):
        """Run the pipeline proto, its multi_processing workers' command (Beam's worker
        module) replaced by `sdk_worker.command`'s; returns the RunnerResult."""
        for env in pipeline_proto.components.environments.values():
            if env.urn == python_urns.SUBPROCESS_SDK and \
                    env.payload.decode("utf-8", "replace").endswith(f"-m {SDK_WORKER}"):
                env.payload = sdk_worker.command().encode("utf-8")
        return super().run_via_runner_api(pipeline_proto, options)
