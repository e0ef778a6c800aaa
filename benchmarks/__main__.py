"""python -m benchmarks <kernel> [--quick] [--dtype f32|bf16]

The primitives (conv, fc, lstm) and the oneDNN comparison plug in here as they land."""
import argparse

from benchmarks import kernel


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["kernel"], help="what to benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, shorter timings")
    parser.add_argument("--dtype", choices=["f32", "bf16"], action="append",
                        help="data type (repeatable; default both)")
    args = parser.parse_args(argv)
    if args.what == "kernel":
        kernel.run(quick=args.quick, dtypes=args.dtype or kernel.DTYPES)


if __name__ == "__main__":
    main()
