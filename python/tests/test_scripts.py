"""Ordinary training scripts under chameleon.torch.Offload: no crash, no
data loss, the same bits as without it (issue 48, "Data loss and crashes
in ordinary scripts": one test per item). The scripts are in
scripts_support.py; each runs in its own child process, plain and then
under Offload, so a segfault fails its test and not the suite.

    cd python/tests && PYTHONPATH=<build>/python python3 -m unittest -v test_scripts
"""
import json
import os
import signal
import subprocess
import sys
import unittest

try:
    import torch  # noqa: F401 - only whether it is there
except ImportError:
    torch = None

needs_torch = unittest.skipIf(torch is None, "python3-torch is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "SCRIPTS-RESULT "        # scripts_support.MARK (not imported: it needs torch)
TIMEOUT_S = 120


def run_scenario(*argv):
    """(problems, notes) of one scenario run in a child process. A child that
    dies (a signal, an error outside the scenario) or hangs is one problem."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([HERE] + [p for p in
                                                     [os.environ.get("PYTHONPATH")] if p]))
    cmd = [sys.executable, "-c", "import sys, scripts_support as s; s.main(sys.argv[1:])",
           *argv]
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"the script hung: no result in {TIMEOUT_S} s"], {}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
            return result["problems"], result["notes"]
    tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return [f"CRASH: the interpreter died of {name}; stderr ends:\n{tail}"], {}
    return [f"the child exited with status {proc.returncode} and no result:\n{tail}"], {}


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
