"""The reliability review's malformed real-run files (tests/bad_inputs/ingest/, one file per case,
named after the review's id: V = `pdsim validate` inputs, K = Mooncake session traces), run
through the CLI as a user would.

Each bad file ends in exit status 2 with exactly one ``error:`` line naming the file, the line
(for JSON-lines files) and the field, no traceback, within seconds: wrong types, 1e300 and
non-finite values, seeds numpy refuses, JSON nested 100,000 deep (made here, not stored). The
memory cases (V28 AIPerf output length 10^15, V29 genai-bench num_concurrency 10^9) also run in a
subprocess under a 2 GiB address-space limit: they allocated 2.5 GB before failing.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdsim.cli import main

HERE = Path(__file__).resolve().parent
CASES = HERE / "bad_inputs" / "ingest"
SCENARIO = HERE / "bad_inputs" / "_base_colocated.yaml"
SECONDS = 20.0  # a bound on hangs, not a timing test (the first case imports the simulator)

VALIDATE = ["validate", "{f}", "--scenario", str(SCENARIO)]
# file -> (command after `pdsim`, text the error line must hold after "error: FILE: ")
REFUSED = {
    "V03_bench_ttfts_strings.json": (VALIDATE, "ttfts[0]: expected a number of seconds, got 'a'"),
    "V04_bench_itls_strings.json": (VALIDATE, "itls[0][0]: expected a number of seconds, got 'a'"),
    "V05_bench_input_lens_1e300.json": (VALIDATE, "input_lens[0]: expected at most 100,000,000 tokens, got 1e+300"),
    "V06_bench_output_lens_1e300.json": (VALIDATE, "output_lens[0]: expected at most 100,000,000 tokens"),
    "V09_bench_start_times_minus_inf.json": (VALIDATE, "start_times[1]: expected a finite number, got -inf"),
    "V10_bench_start_times_strings.json": (VALIDATE, "start_times[0]: expected a number of seconds, got 'a'"),
    "V12_bench_request_rate_string.json": (VALIDATE, "request_rate: expected a rate > 0 in requests/s or inf, "
                                                     "got 'fast'"),
    "V13_bench_seed_string.json": (VALIDATE, "seed: expected an integer in [0, 2**32 - 1], got 'x'"),
    "V14_bench_seed_negative.json": (VALIDATE, "seed: expected an integer in [0, 2**32 - 1], got -1"),
    "V21_aiperf_ttft_string.jsonl": (VALIDATE, "line 2: metrics.time_to_first_token: expected {\"value\": ..., "
                                               "\"unit\": ...}, got 'fast'"),
    "V23_aiperf_start_ns_string.jsonl": (VALIDATE, "line 2: metadata.request_start_ns: expected an integer of "
                                                   "nanoseconds >= 0, got 'zero'"),
    "V24_aiperf_osl_nan.jsonl": (VALIDATE, "line 2: metrics.output_sequence_length.value: expected a positive "
                                           "integer, got nan"),
    "V25_aiperf_isl_1e300.jsonl": (VALIDATE, "line 2: metrics.input_sequence_length.value: expected at most "
                                             "100,000,000 tokens, got 1e+300"),
    "V26_aiperf_icl_value_dict.jsonl": (VALIDATE, "line 2: metrics.inter_chunk_latency.value: expected a list of "
                                                  "times"),
    "V28_aiperf_osl_1e15.jsonl": (VALIDATE, "line 2: metrics.output_sequence_length.value: expected at most "
                                            "100,000,000 tokens, got 1000000000000000"),
    "V28b_aiperf_osl_1e8_over_3_chunks.jsonl": (VALIDATE, "line 2: metrics.output_sequence_length.value: "
                                                          "100,000,000 tokens over 4 chunks is more than 256 tokens "
                                                          "per chunk"),
    # server request logs (not in the review; same crash class: OverflowError / ValueError before)
    "L01_sglang_log_completion_tokens_1e400.log": (VALIDATE, "line 3: meta_info.completion_tokens: expected a "
                                                             "positive integer, got inf"),
    "L02_sglang_log_e2e_not_a_number.log": (VALIDATE, "line 3: meta_info.e2e_latency: expected a number, got 'e'"),
    "L03_vllm_log_max_tokens_1e22.log": (VALIDATE, "line 1: max_tokens: expected at most 100,000,000 tokens"),
    "S84_trace_path_a_folder.yaml": (["run", "{f}", "--no-progress"],
                                     "workload.trace.path: . is a directory; expected a trace file"),
}
# made at test time (100,000-deep JSON lines: 200 kB each, not worth storing)
DEEP = "[" * 100_000 + "]" * 100_000
GENERATED = {
    "V27_aiperf_deep_nesting.jsonl": (lambda: (CASES / "V21_aiperf_ttft_string.jsonl").read_text().splitlines()[0]
                                      + "\n" + DEEP + "\n", VALIDATE, "line 2: invalid JSON (nested too deeply)"),
    "K06_sessions_deep_nesting.jsonl": (lambda: json.dumps({"session_id": "a", "input_length": 10,
                                                            "output_length": 2, "timestamp": 0}) + "\n" + DEEP + "\n",
                                        ["workload", "stats", "{f}"], "line 2: invalid JSON (nested too deeply)"),
}


def _args(cmd: list[str], f: Path) -> list[str]:
    return [a.replace("{f}", str(f)) for a in cmd]


def _one_clean_line(rc: int, out: str, err: str, f: Path, expect: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: "), err
    assert "Traceback" not in err + out and "internal failure" not in err
    assert expect in lines[0], lines[0]
    assert len(lines[0]) < 600


def test_the_corpus_and_this_table_agree():
    files = {p.name for p in CASES.iterdir() if p.is_file() and not p.name.startswith("good_")}
    assert files == set(REFUSED) | {"V29_genai_bench_concurrency_1e9.json"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_real_run_file_is_one_clean_error_line(case, capsys):
    f = CASES / case
    cmd, expect = REFUSED[case]
    t0 = time.perf_counter()
    rc = main(_args(cmd, f))
    out, err = capsys.readouterr()
    _one_clean_line(rc, out, err, f, expect)
    assert time.perf_counter() - t0 < SECONDS


@pytest.mark.parametrize("case", sorted(GENERATED))
def test_deep_nesting_is_one_clean_error_line(case, tmp_path, capsys):
    make, cmd, expect = GENERATED[case]
    f = tmp_path / case
    f.write_text(make())
    rc = main(_args(cmd, f))
    out, err = capsys.readouterr()
    _one_clean_line(rc, out, err, f, expect)


def test_record_of_a_single_run_file_says_what_record_is_for(capsys):
    f = CASES / "good_bench.json"
    rc = main(["validate", str(f), "--scenario", str(SCENARIO), "--record", "999"])
    err = capsys.readouterr().err
    assert rc == 2 and "None" not in err
    assert f"error: {f}: record: line 999: this file is one JSON document holding one run" in err


def test_genai_bench_concurrency_past_its_requests_is_read_as_their_number(capsys):
    from pdsim.ingest import read_run

    ing = read_run(CASES / "V29_genai_bench_concurrency_1e9.json")
    assert ing.record.meta["max_concurrency"] == 3 == len(ing.record)
    assert any("num_concurrency 1,000,000,000 is more than the run's 3 requests: read as 3 users" in n
               for n in ing.notes)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


def test_declared_counts_allocate_nothing_in_a_small_address_space(tmp_path):
    """V28 and V29 allocated 2.56 GB / 2.57 GB from one declared number before failing."""
    # both cases in one interpreter (one import of pdsim, not two)
    code = ("import sys\nfrom pdsim.cli import main\n"
            "print([main(['workload', 'stats', f]) for f in sys.argv[1:]])\n")
    r = subprocess.run([sys.executable, "-c", code, str(CASES / "V28_aiperf_osl_1e15.jsonl"),
                        str(CASES / "V29_genai_bench_concurrency_1e9.json")],
                       capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[2, 0]", r.stdout + r.stderr
    assert "MemoryError" not in r.stderr and "Traceback" not in r.stderr
    assert "metrics.output_sequence_length.value: expected at most 100,000,000 tokens" in r.stderr


@pytest.mark.parametrize("case, expect", [
    ("V12_bench_request_rate_string.json", "request_rate: expected a rate > 0 in requests/s or inf, got 'fast'"),
    ("V09_bench_start_times_minus_inf.json", "start_times[1]: expected a finite number"),
])
def test_workload_stats_refuses_them_too(case, expect, capsys):
    f = CASES / case  # the same files read as a workload (the trace reader's bench format)
    rc = main(["workload", "stats", str(f)])
    out, err = capsys.readouterr()
    _one_clean_line(rc, out, err, f, expect)
