"""`python -m traces.coding`: the coding testbed's report-vs-intervene benchmark (see traces.coding.bench)."""

import argparse

from traces.coding.bench import BENCH

parser = argparse.ArgumentParser(prog="python -m traces.coding", description=BENCH.help)
BENCH.add_arguments(parser)
raise SystemExit(BENCH.run(parser.parse_args()))
