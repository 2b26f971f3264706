"""The reliability review's inputs for traces, workload specs and sweeps (tests/bad_inputs/, one
file per case, named after the review's id), run through the CLI as a user would.

Every bad input must end in exit status 2 with exactly one ``error:`` line that names the file
and the field or line, and no traceback, within seconds. Inputs the review found mishandled but
that are valid (a gzip trace without ``.gz``, a UTF-8 byte-order mark) must be read correctly.
The memory cases also run in a subprocess under a 2 GiB address-space limit: they used to
allocate 7 GiB or more before failing.
"""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdsim.cli import main

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "bad_inputs"
SECONDS = 5.0  # per case, in-process

# id -> (command after `pdsim`, with {f} the case file and {tmp} a scratch folder; expected text)
REFUSED = {
    # traces: pdsim workload stats FILE
    "T14_bench_input_lens_int.json": (["workload", "stats", "{f}"],
                                      "input_lens: expected a list of per-request token counts, got 5"),
    "T20_input_length_1e300.jsonl": (["workload", "stats", "{f}"],
                                     "line 2: input_length: expected at most 100,000,000 tokens, got 1e+300"),
    "T21_input_length_2pow63.jsonl": (["workload", "stats", "{f}"],
                                      "line 2: input_length: expected at most 100,000,000 tokens"),
    "T22_timestamp_infinity.jsonl": (["workload", "stats", "{f}"], "line 2: timestamp: expected a finite number"),
    "T22b_timestamp_nan.jsonl": (["workload", "stats", "{f}"], "line 2: timestamp: expected a finite number"),
    "T29_bench_empty_lists.json": (["workload", "stats", "{f}"],
                                   "input_lens, output_lens: empty lists: the run recorded no requests"),
    "T38_hash_ids_booleans.jsonl": (["workload", "stats", "{f}"],
                                    "line 1: hash_ids: expected a list of integers, got [true, false]"),
    "T39_latin1_row.jsonl": (["workload", "stats", "{f}"], "line 2: not UTF-8 text (byte 0xe9 at column"),
    "T45_timestamp_1e300.jsonl": (["workload", "stats", "{f}"],
                                  "line 2: timestamp: 3.17e+289 years after the first request; a trace spans at most "
                                  "10 years"),
    "SEC3_azure_header_of_any_file.txt": (["workload", "stats", "{f}", "--format", "azure"],
                                          "line 1: header: missing columns 'TIMESTAMP', 'ContextTokens', "
                                          "'GeneratedTokens' (found 1 column: 'root:x:0:0:root:/r…)"),
    # workload specs inside scenarios: pdsim run FILE
    "S42_normal_mean_inf.yaml": (["run", "{f}", "--no-progress"], "workload.input.mean: expected a finite number"),
    "S76_sessions_1e9.yaml": (["run", "{f}", "--no-progress"],
                              "workload.conversation.sessions: 1,000,000,000 sessions is more than the limit of "
                              "2,000,000 requests per workload"),
    "S77_num_requests_1e9.yaml": (["run", "{f}", "--no-progress"],
                                  "workload.num_requests: 1,000,000,000 requests is more than the limit"),
    "S81_trace_time_scale_nan.yaml": (["run", "{f}", "--no-progress"],
                                      "workload.trace.time_scale: expected a finite number, got nan"),
    "S82_trace_limit_0.yaml": (["run", "{f}", "--no-progress"], "workload.trace.limit: must be >= 1"),
    "S83_trace_start_s_negative.yaml": (["run", "{f}", "--no-progress"], "workload.trace.start_s: must be >= 0"),
    # sweeps: pdsim sweep FILE --out DIR
    "W05_range_stop_below_start.yaml": (["sweep", "{f}", "--out", "{tmp}/o"], "axes[0].range.stop: must be >= start"),
    "W06_constraints_max_gpus_0.yaml": (["sweep", "{f}", "--out", "{tmp}/o"], "constraints.max_gpus: must be >= 1"),
    "W15_range_step_1e-9.yaml": (["sweep", "{f}", "--out", "{tmp}/o"],
                                 "axes[0].range.step: the range gives 1,000,000,000 values; an axis takes at most "
                                 "100,000"),
    "W16_grid_200_cubed.yaml": (["sweep", "{f}", "--out", "{tmp}/o"],
                                "axes: the axes give 8,000,000 configurations (200 x 200 x 200); a sweep runs at most "
                                "10,000"),
    "W18_slo_ttft_negative.yaml": (["sweep", "{f}", "--out", "{tmp}/o"], "slo.ttft_ms: must be > 0"),
    "W20_valid_sweep_for_out_a_file.yaml": (["sweep", "{f}", "--out", "{f}"],
                                            "--out: {f} is a file; expected a folder"),
    "W23_max_rate_on_fixed_batch.yaml": (["sweep", "{f}", "--out", "{tmp}/o"],
                                         "search.rate_field: workload.rate does not change the arrival times of this "
                                         "'fixed_batch' workload"),
    "W25_log_range_from_0.yaml": (["sweep", "{f}", "--out", "{tmp}/o"], "axes[0].range.start: a log range needs "
                                                                        "start > 0"),
}
# named by the file, not by ``error: FILE: ...`` (the problem is a command-line argument)
ARGUMENT_ERRORS = {"W20_valid_sweep_for_out_a_file.yaml"}
# refused by argparse (exit 2 with a usage line, as for any bad argument)
USAGE = {"W19_valid_sweep_for_workers_-1.yaml": (["sweep", "{f}", "--out", "{tmp}/o", "--workers", "-1"],
                                                 "argument --workers: expected an integer >= 1, got -1")}
# valid inputs the review saw fail: read correctly now
ACCEPTED = {
    "T10_gzip_named_jsonl.jsonl": "3 over 1.5 s",
    "T11_gzip_named_csv.csv": "2 over 0.1 s",
    "T24_azure_bom_header.csv": "2 over 0.1 s",
}
MEMORY = ["S76_sessions_1e9.yaml", "S77_num_requests_1e9.yaml", "W15_range_step_1e-9.yaml", "W16_grid_200_cubed.yaml"]


def _args(cmd: list[str], f: Path, tmp: Path) -> list[str]:
    return [a.replace("{f}", str(f)).replace("{tmp}", str(tmp)) for a in cmd]


def test_the_corpus_and_this_table_agree():
    files = {p.name for p in CASES_DIR.iterdir() if p.is_file() and not p.name.startswith(("_", "good_"))
             and p.name != "README.md"}
    assert files == set(REFUSED) | set(USAGE) | set(ACCEPTED) | {"W22_max_total_tokens_10.yaml"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_input_is_one_clean_error_line(case, tmp_path, capsys):
    f = CASES_DIR / case
    cmd, expect = REFUSED[case]
    t0 = time.perf_counter()
    rc = main(_args(cmd, f, tmp_path))
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err + out and "internal failure" not in err
    assert expect.replace("{f}", str(f)) in lines[0], lines[0]
    if case not in ARGUMENT_ERRORS:
        assert lines[0].startswith(f"error: {f}: "), lines[0]
    assert len(lines[0]) < 600, "an error line quotes short excerpts only"
    assert wall < SECONDS, wall


@pytest.mark.parametrize("case", sorted(USAGE))
def test_bad_arguments_are_usage_errors(case, tmp_path, capsys):
    cmd, expect = USAGE[case]
    with pytest.raises(SystemExit) as ei:
        main(_args(cmd, CASES_DIR / case, tmp_path))
    err = capsys.readouterr().err
    assert ei.value.code == 2 and expect in err and "Traceback" not in err


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_inputs_the_review_saw_fail_are_read(case, capsys):
    assert main(["workload", "stats", str(CASES_DIR / case)]) == 0
    assert ACCEPTED[case] in capsys.readouterr().out


def test_an_infeasible_configuration_is_a_point_with_its_whole_reason(tmp_path, capsys):
    # W22: max_total_tokens 10 is a configuration that cannot run, not a bad sweep
    rc = main(["sweep", str(CASES_DIR / "W22_max_total_tokens_10.yaml"), "--out", str(tmp_path / "o"),
               "--workers", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 infeasible" in out
    line = next(ln for ln in out.splitlines() if "cluster.colocated[0]" in ln)
    assert "does not fit" in line or "max_total_tokens" in line


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


@pytest.mark.parametrize("case", MEMORY)
def test_memory_cases_fail_fast_in_a_small_address_space(case, tmp_path):
    cmd, expect = REFUSED[case]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pdsim"] + _args(cmd, CASES_DIR / case, tmp_path),
                       capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and expect in r.stderr and "Traceback" not in r.stderr
    assert time.perf_counter() - t0 < 20
