"""`python -m traces.coding`: the coding testbed's report-vs-intervene benchmark (see traces.bench.coding)."""

import argparse

from traces.bench.coding import BENCH

parser = argparse.ArgumentParser(prog="python -m traces.coding", description=BENCH.help)
BENCH.add_arguments(parser)
raise SystemExit(BENCH.run(parser.parse_args()))
