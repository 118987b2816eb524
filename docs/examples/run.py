"""The README's run command: profile the example matmul on a GPU, or decode its shipped capture.

    python docs/examples/run.py [OUT_DIR]

With an NVIDIA GPU (and torch): runs docs/examples/matmul.py inside a proton-lite session.
Without one: decodes the real H100 capture docs/examples/matmul.plraw where it lies.  Either
way it writes OUT_DIR/matmul.pftrace (default: the current directory) and prints the summary.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def have_gpu() -> bool:
    try:
        from cuda.bindings import driver
        import torch  # noqa: F401  (the example uses torch tensors)
    except ImportError:
        return False
    try:
        err, = driver.cuInit(0)[:1]
    except Exception:  # no driver library at all (cuda-pathfinder raises rather than return an error)
        return False
    if err != driver.CUresult.CUDA_SUCCESS:
        return False
    err, count = driver.cuDeviceGetCount()
    return err == driver.CUresult.CUDA_SUCCESS and count > 0


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, "matmul")
    from proton_lite.viewer.cli import main as cli
    if have_gpu():
        print("GPU found: profiling docs/examples/matmul.py", file=sys.stderr)
        rc = subprocess.call([sys.executable, os.path.join(HERE, "matmul.py"), base])
        if rc:
            return rc
    else:
        print("no GPU here: decoding the H100 capture docs/examples/matmul.plraw", file=sys.stderr)
        capture = os.path.join(HERE, "matmul.plraw")
        rc = cli(["trace", capture, "-o", base + ".pftrace"])
        return rc or cli(["summary", capture])
    return cli(["summary", base + ".plraw"])


if __name__ == "__main__":
    sys.exit(main())
