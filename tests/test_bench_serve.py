"""`bench serve`'s harness: its pure parts (the figures of a wave, the pairing and the bars, llama-server's
command line and the matched context), and its rows end to end through the official client, at
`--quick` size, on real servers: Hearth's `engine serve` and llama-server built from the vendored
llama.cpp (scripts/test.sh builds it once at set-up; a run without that builds it here, once)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.bench import concurrency, llama_tools, pairing, serve_rows
from engine.bench.serve_client import StreamedReply, story, wave_figures
from engine.bench.serve_sides import (STREAM_PAD, Server, Setup, check_matched, hearth_loaded, hearth_serve_args,
                                      llama_server_command, llama_server_env, per_sequence)


def reply(start: float, ttft: float, tokens: int, tpot: float) -> StreamedReply:
    first = start + ttft
    return StreamedReply(start=start, first=first, end=first + tpot * (tokens - 1), tokens=tokens, prompt_tokens=30,
                 cached_tokens=0, text="x", finish="length")


def test_a_replys_ttft_and_tpot_come_from_its_first_text_and_its_end():
    r = reply(10.0, 0.25, 11, 0.02)
    assert round(r.ttft_s, 6) == 0.25 and round(r.tpot_s, 6) == 0.02 and round(r.decode_tok_s, 6) == 50.0
    one = reply(0.0, 0.1, 1, 0.0)  # a reply of one token has no time per output token
    assert one.tpot_s is None and one.decode_tok_s is None


def test_a_waves_figures_are_its_tokens_over_its_wall_time_and_the_percentiles_of_its_requests():
    replies = [reply(0.0, t / 1000, 5, p / 1000) for t, p in ((100, 10), (200, 20), (300, 30), (400, 40), (1400, 50))]
    got = wave_figures(replies, 2.0)
    assert got["requests"] == 5 and got["tokens"] == 25 and got["tok_s"] == 12.5
    # linear-interpolated percentiles: p50 the middle request, p99 96% of the way from the 4th to the 5th
    assert got["ttft_ms_p50"] == 300.0 and got["ttft_ms_p99"] == 1360.0
    assert got["tpot_ms_p50"] == 30.0 and got["tpot_ms_p99"] == 49.6
    assert got["prompt_tokens"] == 30


def test_each_request_of_a_round_opens_with_words_of_its_own():
    prompts = [story("8.2", i)[0]["content"] for i in range(16)]
    assert len(set(prompts)) == 16 and all(p.startswith(f"Story 8.2-{i}.") for i, p in enumerate(prompts))
    assert story("8.2", 0) != story("8.3", 0)  # and a round's differ from the next round's


def test_the_ratios_pair_each_round_and_the_bars_read_the_interval():
    def wave(tok_s: float, p99: float) -> dict:
        return {"tok_s": tok_s, "ttft_ms_p50": p99 / 2, "ttft_ms_p99": p99, "tpot_ms_p50": 10.0, "tpot_ms_p99": 12.0}

    # The machine slows by half over the rounds; Hearth is 1.1x the throughput and 0.9x the p99 TTFT each round.
    llama = [wave(100.0 / (1 + r / 2), 200.0 * (1 + r / 2)) for r in range(5)]
    hearth = [wave(110.0 / (1 + r / 2), 180.0 * (1 + r / 2)) for r in range(5)]
    ratios = concurrency.level_ratios({"hearth": hearth, "llama-server": llama})
    assert ratios["tok_s"]["median"] == ratios["tok_s"]["min"] == ratios["tok_s"]["max"] == 1.1
    assert ratios["ttft_ms_p99"]["ci"] == [0.9, 0.9] and ratios["tpot_ms_p50"]["median"] == 1.0
    assert concurrency.bars(ratios) == {"throughput >= 1.0x": "met", "p99 TTFT no worse": "met"}
    assert "throughput 1.100x [1.100, 1.100] met; p99 TTFT 0.900x [0.900, 0.900] met" in \
        concurrency.level_line(4, ratios, concurrency.bars(ratios))
    slower = [wave(90.0, 250.0)] * 5
    assert concurrency.bars(concurrency.level_ratios({"hearth": slower, "llama-server": [wave(100.0, 200.0)] * 5})) \
        == {"throughput >= 1.0x": "not met", "p99 TTFT no worse": "not met"}
    one_round = concurrency.level_ratios({"hearth": hearth[:1], "llama-server": llama[:1]})
    assert set(concurrency.bars(one_round).values()) == {"too few rounds"}


def test_a_latency_bar_is_met_only_when_the_whole_interval_is_under_it():
    assert pairing.at_most(0.8, 1.0, 1.0) == "met"
    assert pairing.at_most(1.01, 1.2, 1.0) == "not met"
    assert pairing.at_most(0.9, 1.1, 1.0) == "within noise"
    assert pairing.at_most(0.1, 0.2, 1.0, coverage=0.75) == "too few rounds"


def test_llama_servers_context_is_the_total_over_its_slots_one_stream_each(tmp_path):
    cmd = llama_server_command(Path("/x/llama-server"), Path("/m/model.gguf"), parallel=4, n_ctx_seq=1024,
                               threads=2, port=8123, exactness="fast")
    arg = dict(zip(cmd, cmd[1:]))
    assert arg["-np"] == "4" and arg["-c"] == "4096" and "--no-kv-unified" in cmd  # 4 streams of 1,024
    assert arg["--host"] == "127.0.0.1" and arg["--port"] == "8123" and arg["-t"] == arg["-tb"] == "2"
    assert arg["-fa"] == "auto" and "--no-repack" not in cmd  # the fast profile: llama.cpp's own kernels
    assert arg["-m"] == "/m/model.gguf" and arg["--alias"] == "model"
    exact = llama_server_command(Path("/x/llama-server"), Path("/m/model.gguf"), parallel=1, n_ctx_seq=512,
                                 threads=2, port=8123, exactness="exact")
    assert dict(zip(exact, exact[1:]))["-fa"] == "off" and "--no-repack" in exact
    assert llama_server_env("exact")["GGML_CPU_TILED_MM"] == "0" and "GGML_CPU_TILED_MM" not in llama_server_env("fast")
    with pytest.raises(ValueError, match="multiple of 256"):
        llama_server_command(Path("/x"), Path("/m.gguf"), parallel=2, n_ctx_seq=1000, threads=2, port=1,
                             exactness="fast")
    hearth = hearth_serve_args(Path("/m/model.gguf"), parallel=4, n_ctx_seq=1024, threads=2, exactness="fast")
    harg = dict(zip(hearth, hearth[1:]))
    assert (harg["--parallel"], harg["--ctx"], harg["--threads"], harg["--draft"]) == ("4", "1024", "2", "none")


def test_the_context_per_sequence_is_rounded_up_as_llama_cpp_pads_a_stream():
    assert STREAM_PAD == 256
    assert [per_sequence(n) for n in (1, 256, 257, 288, 1024)] == [256, 256, 512, 512, 1024]


def test_a_load_that_differs_from_the_one_asked_is_named():
    def server(name: str, **loaded) -> Server:
        return Server(name, None, "", "", Path("x"), loaded)  # type: ignore[arg-type]

    assert check_matched(server("hearth", n_ctx_seq=1024), server("llama-server", n_ctx_seq=1024, slots=4),
                         1024, 4) == []
    assert check_matched(server("hearth", n_ctx_seq=2048), server("llama-server", n_ctx_seq=1024, slots=2),
                         1024, 4) == ["hearth holds 2048 tokens per sequence, not 1024",
                                      "llama-server runs 2 slots, not 4"]


def test_what_engine_serve_loaded_is_read_from_its_start_up_line():
    log = ("loading model...\nloaded SmolLM2-135M-Instruct: Q4_1, context 4,096, runs on cpu (CPU), "
           "0 layers offloaded, speculation ngram\nnote: something\n")
    assert hearth_loaded(log) == {"n_ctx_seq": 4096, "runtime": "cpu", "device": "CPU", "gpu_layers": 0,
                                  "speculation": "ngram"}
    assert hearth_loaded("loading model...\n") == {}


def test_the_server_build_keeps_the_tools_cache_key_and_adds_only_the_servers_switches():
    plain = llama_tools.build_flags((), llama_tools.TARGETS)
    server = llama_tools.build_flags((), (llama_tools.SERVER,))
    assert plain == llama_tools.flags() and server[:len(plain)] == plain
    assert server[len(plain):] == llama_tools.SERVER_FLAGS and "-DLLAMA_BUILD_SERVER=ON" in server
    # later -D options win in CMake: the server's switch overrides COMMON's, and the folder stays the same
    assert plain.index("-DLLAMA_BUILD_SERVER=OFF") < server.index("-DLLAMA_BUILD_SERVER=ON")
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in server  # nothing downloaded at build time


def test_the_rows_the_flags_pick_and_the_levels_and_models_they_take(bundled_path):
    ns = argparse.Namespace
    assert concurrency.wanted_rows(ns()) == ("throughput", "hol", "spec")
    assert concurrency.wanted_rows(ns(hol=True, spec=False)) == ("hol",)
    assert concurrency.wanted_rows(ns(hol=True, spec=True)) == ("hol", "spec")
    assert concurrency.parse_levels(None) == (1, 2, 4, 8) and concurrency.parse_levels("1, 3") == (1, 3)
    for bad in ("two", "0,2"):
        with pytest.raises(SystemExit, match="--streams"):
            concurrency.parse_levels(bad)
    assert concurrency.resolve_model(None) == bundled_path == concurrency.resolve_model("bundled")
    with pytest.raises(SystemExit, match="takes a .gguf file, bundled or target"):
        concurrency.resolve_model("/no/such/model.gguf")


def quick(tmp_path: Path, bundled_path: Path, server: Path | None) -> Setup:
    return Setup(model=bundled_path, threads=1, exactness="fast", tokens=16, spec_tokens=16, rounds=1, levels=(2,),
                 per_stream=1, n_ctx_seq=512, workdir=tmp_path, llama_server=server, quick=True)


def test_the_default_run_sends_shorter_throughput_replies_and_a_given_length_goes_to_every_row(tmp_path, bundled_path):
    import argparse

    from engine.bench import TOKENS, bench_tokens

    def setup(tokens):
        a = argparse.Namespace(model=None, threads=1, exactness="fast", tokens=tokens, rounds=5, streams=None,
                               ctx=None, quick=False)
        return concurrency.setup_for(a, tmp_path, ("hol",))

    s = setup(None)  # what the CLI passes when --tokens is not given
    assert (s.tokens, s.spec_tokens, s.rounds, s.levels) == (concurrency.THROUGHPUT_TOKENS, concurrency.SPEC_TOKENS,
                                                             5, concurrency.LEVELS)
    assert concurrency.THROUGHPUT_TOKENS < concurrency.SPEC_TOKENS
    assert (setup(300).tokens, setup(300).spec_tokens) == (300, 300)
    # Every other benchmark still gets the one default length.
    assert bench_tokens("prefix", None) == TOKENS and bench_tokens("serve", None) is None
    assert bench_tokens("prefix", 40) == 40


@pytest.mark.timeout(1800)  # the first run on a machine builds llama-server (scripts/test.sh does it at set-up)
def test_a_level_runs_hearth_against_llama_server_through_the_official_client(tmp_path, bundled_path):
    binary = llama_tools.ensure_tools(targets=(llama_tools.SERVER,)) / llama_tools.SERVER
    row = concurrency.run_level(quick(tmp_path, bundled_path, binary), 2)
    assert row["matched"] == "yes", row
    assert row["llama_server_loaded"]["n_ctx_seq"] == 512 and row["llama_server_loaded"]["slots"] == 2
    assert row["hearth_loaded"]["n_ctx_seq"] == 512 and row["hearth_loaded"]["speculation"] == "none"
    for side in ("hearth", "llama-server"):
        got = row[side]
        # ignore_eos: every reply ran to max_tokens on both servers
        assert got["requests"] == 2 and got["tok_s"] > 0 and got["ttft_ms_p99"] >= got["ttft_ms_p50"] > 0, got
        assert got["tpot_ms_p50"] > 0 and got["prompt_tokens"] > 10
    assert row["hearth"]["tok_s_rounds"] and row["bars"] == {"throughput >= 1.0x": "too few rounds",
                                                             "p99 TTFT no worse": "too few rounds"}


def test_the_head_of_line_row_runs_through_engine_serve(tmp_path, bundled_path, monkeypatch):
    monkeypatch.setattr(serve_rows, "LONG_TOKENS", 700)  # three chunks: enough to arrive during the read
    hol = serve_rows.hol_row(quick(tmp_path, bundled_path, None))
    assert abs(hol["long_prompt_tokens"] - 700) <= 8 and hol["chunk_tokens"] == 256
    (r,) = hol["rounds"]
    assert r["long_prompt_tokens"] == hol["long_prompt_tokens"] and r["busy_ms"] > 0 and r["chunk_ms"] > 0
    assert hol["busy_vs_alone_plus_chunk"]["median"] == round(r["busy_ms"] / (r["alone_ms"] + r["chunk_ms"]), 3)
    assert hol["verdict"] == "too few rounds" and "head-of-line" in hol["line"]


def test_the_speculation_row_runs_servers_with_and_without_drafts(tmp_path, bundled_path, monkeypatch):
    text = serve_rows.rewrite_prompt()
    assert text.startswith("Make three small changes to this file")  # bench speculative's rewrite set
    monkeypatch.setattr(serve_rows, "rewrite_prompt", lambda: text[:1200])  # a shorter file: a quicker read
    spec = serve_rows.spec_row(quick(tmp_path, bundled_path, None))
    assert spec["streams"] == 4 and set(spec["decode_tok_s"]) == {"plain", "auto"}
    assert spec["tokens_per_reply"]["plain"] > 1 and spec["auto_vs_plain"]["median"] > 0
    assert 0 <= spec["same_text"] <= 1 and spec["verdict"] == "too few rounds"
    drafts = spec["drafts"]  # the speculating server's own counters (GET /metrics)
    assert set(drafts) >= {"num_drafts_total", "num_draft_tokens_total", "num_accepted_tokens_total"}
    assert 0 <= drafts["num_accepted_tokens_total"] <= drafts["num_draft_tokens_total"]
    logs = {p.name: p.read_text() for p in tmp_path.glob("hearth-*.log")}
    assert "speculation none" in logs["hearth-plain.log"] and "speculation auto" in logs["hearth-auto.log"]
    # Its limit, from this machine's step times: every sequence drafting k a round, every draft accepted.
    limit = spec["limit"]
    assert set(limit["by_k"]) == set(serve_rows.LIMIT_KS) and limit["limit"] == max(limit["by_k"].values())
    assert limit["by_k"][limit["at_k"]] == limit["limit"] > 0 and limit["prompt_tokens"] > 200
    steps = limit["step_ms"]
    assert steps[16] > steps[0] > 0  # 68 rows take longer than 4
    for k in serve_rows.LIMIT_KS:  # (1 + k) tokens for the step of (1 + k) rows each, against 1 for the plain one
        assert limit["by_k"][k] == pytest.approx((1 + k) * steps[0] / steps[k], rel=0.02)  # ms are rounded
    assert f"limit {limit['limit']:.2f}x" in spec["line"]
    # And on the text the speculating server's replies wrote (copy_limit.py): never past the machine's.
    on_text = spec["text_limit"]
    assert on_text["tokens"] > 0 and 1.0 <= on_text["limit"] <= limit["limit"] + 0.01 and 0 <= on_text["copied"] < 1
    assert f"on the text the replies wrote {on_text['limit']:.2f}x" in spec["line"]
    assert len(on_text["rounds"]) == len(spec["decode_tok_s_rounds"]["auto"]) == 1
