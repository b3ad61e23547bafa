#!/usr/bin/env python3
"""Plots P(irrecoverable data loss) against the number of failed processes
for r = 2, 3, 4 copies, like Fig. 3 of the ReStore paper, from the answers
of reprise-dataloss --json: on the left the model at about 10^6 and 10^4
processes, on the right the model against the simulator of the real
placement at about 10^4 processes. Needs matplotlib; neither the build nor
the tests use this script.

    tools/dataloss/plot_loss.py [--binary build/release/tools/dataloss/reprise-dataloss]
                                [--output docs/data_loss.png]
"""

import argparse
import json
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

LARGE = 999_996  # about 10^6, divisible by 2, 3 and 4
SMALL = 9_996  # about 10^4, the same
COPIES = (2, 3, 4)
SIMULATED_POINTS = 24
TRIALS = 2000


def failure_grid(processes, points):
    """About `points` failure counts from 1 to p, evenly spaced on a log scale."""
    grid = {round(processes ** (i / (points - 1))) for i in range(points)}
    return sorted(f for f in grid if 1 <= f <= processes)


def ask(binary, processes, copies, failures, trials=0):
    """Runs reprise-dataloss --json; returns {(source, failures): P(loss)}."""
    command = [binary, "--processes", str(processes), "--copies", str(copies), "--json",
               "--failures", ",".join(str(f) for f in failures)]
    if trials:
        command += ["--simulate", str(trials), "--seed", "1"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"plot_loss.py: {' '.join(command)} failed: {result.stderr.strip()}")
    answers = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        if "loss_probability" in record:
            answers[(record["source"], record["failures"])] = record["loss_probability"]
    return answers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="build/release/tools/dataloss/reprise-dataloss")
    parser.add_argument("--output", default="docs/data_loss.png")
    args = parser.parse_args()

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colours = {2: "tab:blue", 3: "tab:orange", 4: "tab:green"}
    for copies in COPIES:
        for processes, style in ((LARGE, "-"), (SMALL, ":")):
            grid = failure_grid(processes, 400)
            answers = ask(args.binary, processes, copies, grid)
            left.plot(grid, [answers[("model", f)] for f in grid], style, color=colours[copies],
                      label=f"r = {copies}, p = {processes:,}")
        grid = failure_grid(SMALL, 400)
        answers = ask(args.binary, SMALL, copies, grid)
        right.plot(grid, [answers[("model", f)] for f in grid], "-", color=colours[copies],
                   label=f"r = {copies}, model")
        points = failure_grid(SMALL, SIMULATED_POINTS)
        simulated = ask(args.binary, SMALL, copies, points, trials=TRIALS)
        right.plot(points, [simulated[("simulator", f)] for f in points], "o", color=colours[copies],
                   markersize=4, label=f"r = {copies}, simulator ({TRIALS} trials)")
    left.set_title(f"Model, p = {LARGE:,} and {SMALL:,} processes")
    right.set_title(f"Model and simulated real placement, p = {SMALL:,}")
    for axes in (left, right):
        axes.set_xscale("log")
        axes.set_xlabel("failed processes (uniformly at random)")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8, loc="upper left")
    left.set_ylabel("P(irrecoverable data loss)")
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
