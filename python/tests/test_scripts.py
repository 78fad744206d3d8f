"""Ordinary training scripts under chameleon.torch.Offload: no crash, no
data loss, the same bits as without it (issue 48, "Data loss and crashes
in ordinary scripts": one test per item). The scripts are in
scripts_support.py; each runs in its own child process (forked), plain and
then under Offload, so a segfault fails its test and not the suite.

    cd python/tests && PYTHONPATH=<build>/python python3 -m unittest -v test_scripts
"""
import faulthandler
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import unittest

try:
    import torch  # noqa: F401 - only whether it is there
except ImportError:
    torch = None

needs_torch = unittest.skipIf(torch is None, "python3-torch is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120


def run_scenario(*argv):
    """(problems, notes) of one scenario run in a child process. A child that
    dies (a signal, an error outside the scenario) or hangs is one problem.
    The child is forked from this process, which has imported torch already
    (a new interpreter spent 1.8 s importing it, most of a scenario's time),
    and has run no op, so each scenario starts from the same state."""
    import scripts_support      # torch and chameleon, once, before the fork
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                os.chdir(HERE)
                faulthandler.enable()   # a crash's Python stack, into err
                scripts_support.main(list(argv))
                status = 0
            except BaseException:       # noqa: B036 - outside the scenario: into err
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        status = wait_for(pid, TIMEOUT_S)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if status is None:
        return [f"the script hung: no result in {TIMEOUT_S} s"], {}
    for line in reversed(stdout.splitlines()):
        if line.startswith(scripts_support.MARK):
            result = json.loads(line[len(scripts_support.MARK):])
            return result["problems"], result["notes"]
    tail = "\n".join(stderr.strip().splitlines()[-6:])
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return [f"CRASH: the interpreter died of {name}; stderr ends:\n{tail}"], {}
    return [f"the child exited with status {os.waitstatus_to_exitcode(status)} and no "
            f"result:\n{tail}"], {}


def wait_for(pid, timeout_s):
    """The child's wait status, or None after killing it at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


@needs_torch
class OrdinaryScripts(unittest.TestCase):
    def scenario(self, *argv):
        problems, notes = run_scenario(*argv)
        if problems:
            extra = {k: v for k, v in notes.items() if k != "traceback"}
            text = "\n  - ".join(problems)
            if "traceback" in notes:
                text += "\n" + notes["traceback"]
            self.fail(f"{' '.join(argv)}:\n  - {text}\n  notes: {extra}")

    # 1-4: storages torch will not resize; after an error or not, every
    # parameter and optimizer-state tensor has its bytes after __exit__.
    def test_01_dataloader_worker_batches(self):
        self.scenario("dataloader")

    def test_02_from_numpy_inputs(self):
        self.scenario("from_numpy")

    def test_03_share_memory_tensors(self):
        self.scenario("share_memory")

    def test_04_parameters_numpy_ed_for_a_histogram(self):
        self.scenario("numpy_histogram")

    # 5-6: the state dict's bytes inside the block.
    def test_05_torch_save_and_pickle_in_the_block(self):
        self.scenario("save_pickle")

    def test_06_deepcopy_and_no_handle_in_the_tensors(self):
        self.scenario("deepcopy")

    # 7-8: storages that change under the glue; a varied model.
    def test_07_data_assignment_copy_set_resize(self):
        for how in ("data_clone", "data_copy", "set", "resize"):
            with self.subTest(how=how):
                self.scenario("storage_change", how)

    def test_08_tied_views_ints_new_param_two_optimizers(self):
        self.scenario("varied_model")

    # 9-10: ops the glue must pass without a fixed limit or a refusal.
    def test_09_op_with_1100_tensor_arguments(self):
        self.scenario("many_tensors")

    def test_10_sparse_gradients_and_meta_module(self):
        for which in ("sparse", "meta"):
            with self.subTest(which=which):
                self.scenario(which)

    # 11-14: the context itself.
    def test_11_nested_offload_refused_clearly(self):
        self.scenario("nested")

    def test_12_each_planner_trains_or_is_refused_when_made(self):
        for planner in ("vdnn", "capuchin", "swapadvisor"):
            with self.subTest(planner=planner):
                self.scenario("planner", planner)

    def test_13_loop_without_step_warned_once(self):
        self.scenario("no_step")

    def test_14_user_exception_mid_step(self):
        self.scenario("user_exception")

    # 15-22: not items of the issue; found by loops written outside it.
    def test_15_packed_sequences_and_ctc_lengths(self):
        self.scenario("host_read")

    def test_16_lbfgs_strong_wolfe_closure(self):
        self.scenario("lbfgs")

    def test_17_checkpoint_saved_and_loaded_in_the_block(self):
        self.scenario("reload")

    def test_18_data_ptr_tie_detection(self):
        self.scenario("data_ptr")

    def test_19_ops_without_a_meta_kernel(self):
        self.scenario("no_meta_kernel")

    def test_20_a_thread_reading_the_model(self):
        self.scenario("threads")

    def test_21_wrapper_subclass_and_dlpack(self):
        self.scenario("subclass_dlpack")

    def test_22_quantization_aware_training(self):
        self.scenario("qat")


if __name__ == "__main__":
    unittest.main(verbosity=2)
