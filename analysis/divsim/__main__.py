"""Command line: `python3 -m divsim diagnose RUN.h5 [--reference BASE.h5] [--json] [--blind]`.

Prints the diagnosis (text, or JSON whose "causes" is the ranked list, [] for a healthy run) and exits
0; exits 2 with one message on stderr when a file is missing or is not a divsim run. `evaluate` runs
the fault-catalog scenario study (divsim.evaluate). Nothing else lives here.
"""
import argparse
import sys

from .diagnose import diagnose


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m divsim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("diagnose", help="diagnose one run, optionally against a reference run")
    d.add_argument("run", help="the run's HDF5 file")
    d.add_argument("--reference", help="a reference run: the fault-free baseline, or another world size")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--blind", action="store_true",
                   help="never read /faults, the config's fault lines or events naming a fault")
    e = sub.add_parser("evaluate", help="score diagnose on generated fault scenarios (see docs/analysis.md)")
    from .evaluate import add_arguments
    add_arguments(e)
    args = parser.parse_args(argv)
    if args.command == "evaluate":
        from .evaluate import main as evaluate_main
        return evaluate_main(args)
    try:
        result = diagnose(args.run, reference=args.reference, blind=args.blind)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"divsim diagnose: error: {e}", file=sys.stderr)
        return 2
    print(result.to_json() if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
