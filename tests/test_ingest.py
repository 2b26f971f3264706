"""pdsim.ingest: real-run files of each tool, made in the tools' documented/source layouts
(the source file each shape follows is named in its reader's docstring), detected from content."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from pdsim.ingest import detect, read_run, read_workload
from pdsim.metrics.results import Results
from pdsim.specs.errors import SpecError
from pdsim.workload.traces import detect_format, read_trace


def _bench(**extra):
    d = {"backend": "sglang", "dataset_name": "random", "request_rate": 4.0, "max_concurrency": None,
         "duration": 3.0, "completed": 3, "request_throughput": 1.0,
         "input_lens": [100, 200, 300], "output_lens": [3, 2, 4], "ttfts": [0.05, 0.06, 0.07],
         "itls": [[0.01, 0.02], [0.01], [0.01, 0.01, 0.03]], "generated_texts": ["", "", ""], "errors": ["", "", ""]}
    d.update(extra)
    return d


def _summary(ing):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return Results(ing.record).summary()


def test_sglang_jsonl_multi_run_detected_and_read(tmp_path):
    f = tmp_path / "out.jsonl"  # appended runs, one JSON object per line (no .json name needed)
    f.write_text(json.dumps(_bench(request_rate=2.0)) + "\n" + json.dumps(_bench()) + "\n")
    assert detect(f) == "sglang-bench-serving" and detect_format(f) == "bench"
    ing = read_run(f)
    assert ing.format == "sglang-bench-serving" and len(ing.record) == 3
    assert "regenerated" in ing.notes[0]  # no start_times: the tool's arrival process, said so
    s = _summary(ing)
    assert s["mean_ttft_ms"] == pytest.approx(60.0)
    assert s["mean_itl_ms"] == pytest.approx(np.mean([10, 20, 10, 10, 10, 30]))
    assert read_run(f, record=1).record.meta["request_rate"] == 2.0


def test_vllm_save_result_with_start_times(tmp_path):
    f = tmp_path / "vllm.json"
    f.write_text(json.dumps(_bench(model_id="m", tokenizer_id="m", num_prompts=3, burstiness=1.0,
                                   start_times=[10.0, 10.5, 11.0], errors=["", "boom", ""])))
    ing = read_run(f)
    assert ing.format == "vllm-bench-serve"
    assert list(ing.record.requests["arrival_s"]) == [0.0, 0.5, 1.0]
    assert ing.record.requests["drop_reason"][1] == "error"
    assert _summary(ing)["completed"] == 2


def test_aiperf_profile_export(tmp_path):
    rows = []
    for i in range(3):
        rows.append({"metadata": {"session_num": i, "x_request_id": f"r{i}", "conversation_id": f"c{i}", "turn_index": 0,
                                  "request_start_ns": 1_000_000_000 + i * 200_000_000,
                                  "request_end_ns": 1_500_000_000 + i * 200_000_000, "worker_id": "w",
                                  "record_processor_id": "p", "benchmark_phase": "profiling", "was_cancelled": False},
                     "metrics": {"time_to_first_token": {"value": 40.0, "unit": "ms"},
                                 "inter_chunk_latency": {"value": [5.0, 6.0, 7.0], "unit": "ms"},
                                 "request_latency": {"value": 58.0, "unit": "ms"},
                                 "input_sequence_length": {"value": 128, "unit": "tokens"},
                                 "output_sequence_length": {"value": 4, "unit": "tokens"}},
                     "error": None})
    rows.append({**rows[0], "metadata": {**rows[0]["metadata"], "benchmark_phase": "warmup"}})
    f = tmp_path / "profile_export.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect(f) == "aiperf-profile-export"
    ing = read_run(f)
    assert len(ing.record) == 3  # warm-up left out
    s = _summary(ing)
    assert s["mean_ttft_ms"] == pytest.approx(40.0) and s["mean_itl_ms"] == pytest.approx(6.0)
    assert np.allclose(ing.record.requests["arrival_s"], [0.0, 0.2, 0.4])


def test_genai_bench_folder(tmp_path):
    (tmp_path / "experiment_metadata.json").write_text(json.dumps({"model": "m"}))
    reqs = [{"ttft": 0.1, "tpot": 0.01, "e2e_latency": 0.2, "num_input_tokens": 100, "num_output_tokens": 11,
             "error_code": None, "error_message": None} for _ in range(4)]
    (tmp_path / "D(100,10)_text-to-text_concurrency_2_time_1s.json").write_text(json.dumps(
        {"aggregated_metrics": {"num_concurrency": 2, "scenario": "D(100,10)"}, "individual_request_metrics": reqs,
         "_time_unit": "s"}))
    assert detect(tmp_path) == "genai-bench"
    ing = read_run(tmp_path)
    s = _summary(ing)
    assert s["mean_ttft_ms"] == pytest.approx(100.0) and s["mean_tpot_ms"] == pytest.approx(10.0)
    assert s["mean_itl_ms"] is None  # genai-bench keeps no per-token times
    assert ing.table.max_concurrency == 2
    assert np.allclose(sorted(ing.record.requests["arrival_s"]), [0, 0, 0.2, 0.2])


def test_sglang_request_log(tmp_path):
    lines = ["[2025-07-01 10:00:00] INFO server started",
             "[2025-07-01 10:00:02] Finish: obj=GenerateReqInput(rid='a', sampling_params={'max_new_tokens': 8}), "
             "out={'text': 'x', 'meta_info': {'id': 'a', 'prompt_tokens': 50, 'completion_tokens': 8, "
             "'e2e_latency': 1.5}}",
             "[2025-07-01 10:00:03] Finish: obj=GenerateReqInput(rid='b'), out={'meta_info': {'id': 'b', "
             "'prompt_tokens': 70, 'completion_tokens': 9, 'e2e_latency': 0.5}}"]
    f = tmp_path / "server.log"
    f.write_text("\n".join(lines) + "\n")
    assert detect(f) == "sglang-log-requests"
    ing = read_run(f)
    assert list(ing.record.requests["input_len"]) == [50, 70]
    assert _summary(ing)["mean_e2e_latency_ms"] == pytest.approx(1000.0)
    t = read_trace(f)  # the trace reader takes it as a workload too
    assert list(t.output_len) == [8, 9] and np.allclose(t.arrival_s, [0.0, 2.0])


def test_vllm_request_log(tmp_path):
    lines = ["INFO 07-01 10:00:00 [logger.py:43] Received request cmpl-1: params: SamplingParams(n=1, max_tokens=16, "
             "ignore_eos=True), prompt_token_ids: [1, 2, 3, 4], lora_request: None.",
             "INFO 07-01 10:00:01 [logger.py:43] Received request cmpl-2: params: SamplingParams(max_tokens=8), "
             "prompt_token_ids: [5, 6], lora_request: None.",
             "INFO 07-01 10:00:03 [async_llm.py:300] Finished request cmpl-1.",
             "INFO 07-01 10:00:03 [async_llm.py:300] Finished request cmpl-2."]
    f = tmp_path / "vllm.log"
    f.write_text("\n".join(lines) + "\n")
    assert detect(f) == "vllm-request-log"
    t = read_workload(f)
    assert list(t.input_len) == [4, 2] and list(t.output_len) == [16, 8]


def test_mooncake_sessions_as_workload(tmp_path):
    rows = [{"session_id": "s1", "timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]},
            {"session_id": "s2", "timestamp": 500, "input_length": 100, "output_length": 5, "hash_ids": [3]},
            {"session_id": "s1", "delay": 2000, "input_length": 700, "output_length": 10, "hash_ids": [1, 2]}]
    f = tmp_path / "sessions.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect(f) == "mooncake-sessions" and detect_format(f) == "mooncake-sessions"
    t = read_trace(f)
    assert np.allclose(t.arrival_s, [0.0, 0.5, 2.0]) and t.hash_ids is not None
    with pytest.raises(SpecError, match="workload format"):
        read_run(f)


def test_bad_files_name_the_problem(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"metadata": {"request_start_ns": 1}, "metrics": {}}\n')
    with pytest.raises(SpecError, match="input_sequence_length"):
        read_run(f)
    g = tmp_path / "plain.txt"
    g.write_text("hello\n")
    with pytest.raises(SpecError, match="not a real-run file"):
        read_run(g)
    h = tmp_path / "b.json"
    h.write_text(json.dumps(_bench(ttfts=[0.1])))
    with pytest.raises(SpecError, match="ttfts"):
        read_run(h)
