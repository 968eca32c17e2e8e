"""Model API faults injected by a real loopback proxy in front of a SimPolicy-backed OpenAI server.

A seeded trial at a 30 % fault rate ends exactly like the fault-free run (same outcome, stage, score
and tool-call sequence) with the retries counted in its record; a fault that outlives the retry policy
is an infrastructure error, never a planner failure, and a pytest item ERRORS and is tabled apart.

run_trial builds its backend with default timeouts (60 s) and backoff (1 s doubling); the tests wrap
``mltb_core.llm.make_backend`` to pass a short timeout and fast backoff, since neither the backend
nor TrialConfig reads them from the environment yet.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from mltb_core.config import TrialConfig
from mltb_core.llm.openai_backend import OpenAIBackend
from mltb_core.llm.prices import FREE
from mltb_core.analysis.resultsfile import read_records
from mltb_core.bench.tasks import get_task
from mltb_core.runner.trial import run_trial

from fault_proxy import FAULTS, FaultProxy
from sim_openai_server import SimOpenAIServer

pytest_plugins = ["pytester"]

MODEL_ID = "sim-gpt"
CLIENT_TIMEOUT = 0.5          # seconds; the proxy's delay fault holds a request for twice that
FAST_BACKEND = {"timeout": CLIENT_TIMEOUT, "backoff_base": 0.005, "backoff_max": 0.02, "max_retries": 4}
TASK = "spaceship-titanic"


@pytest.fixture(scope="module")
def upstream():
    with SimOpenAIServer(skill=0.7, seed=3) as server:
        yield server


@pytest.fixture
def price_table(tmp_path: Path) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(f'[models."{MODEL_ID}"]\ninput = 1.0\noutput = 2.0\n')
    return path


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, price_table: Path):
    """Point the OpenAI backend at a base URL (returned setter), with a test price table and fast retries."""
    import mltb_core.llm as llm

    monkeypatch.setattr(llm, "make_backend", functools.partial(llm.make_backend, **FAST_BACKEND))
    monkeypatch.setenv("MLTB_PRICES", str(price_table))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")

    def use(base_url: str) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    return use


def seeded_trial(out_dir: Path):
    """One seeded react trial through the OpenAI backend (node ids are per episode, so trials compare)."""
    config = TrialConfig(planner="react", model=f"openai:{MODEL_ID}", seed=7, max_iterations=14, llm_cache=False)
    return run_trial(get_task(TASK), config, out_dir)


def tool_call_sequence(record) -> list[dict]:
    steps = [json.loads(line) for line in Path(record.trajectory).read_text().splitlines()]
    return [call for s in steps if s["step_type"] == "tool_execution_initiation"
            for call in s["tools_to_execute"]]


def test_thirty_percent_faults_give_the_fault_free_result_with_retries_counted(upstream, api, tmp_path):
    # The same out_dir for both runs: paths appear in the prompt, and the policy's draws depend on it.
    api(upstream.base_url)
    clean = seeded_trial(tmp_path)
    assert clean.outcome != "infra_error", clean.error
    assert clean.llm_retries == 0 and clean.llm_calls > 3 and clean.cost_usd > 0
    clean_calls = tool_call_sequence(clean)

    with FaultProxy(upstream.base_url, rate=0.3, seed=11, delay_seconds=2 * CLIENT_TIMEOUT) as proxy:
        api(proxy.base_url)
        faulty = seeded_trial(tmp_path)

    assert faulty.outcome == clean.outcome, faulty.error
    assert (faulty.stage_reached, faulty.stage_name, faulty.score) == (clean.stage_reached, clean.stage_name,
                                                                       clean.score)
    assert tool_call_sequence(faulty) == clean_calls
    assert (faulty.llm_calls, faulty.tokens_in, faulty.tokens_out) == (clean.llm_calls, clean.tokens_in,
                                                                       clean.tokens_out)
    # Every injected fault cost exactly one counted retry (none outlived the policy).
    assert proxy.total_injected >= 2
    assert faulty.llm_retries == proxy.total_injected


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_kind_is_retried_and_counted(upstream, fault):
    with FaultProxy(upstream.base_url, rate=1.0, faults=(fault,), max_faults=2,
                    delay_seconds=2 * CLIENT_TIMEOUT) as proxy:
        backend = OpenAIBackend(MODEL_ID, base_url=proxy.base_url, api_key="k", price=FREE, **FAST_BACKEND)
        response = backend.complete([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], [], n=2)
    assert proxy.injected[fault] == 2
    assert backend.usage.retries == 2 and len(response.candidates) == 2


@pytest.mark.parametrize("down", ["all_faults", "upstream_down"])
def test_fault_outliving_the_retry_policy_is_an_infra_error(upstream, api, tmp_path, down):
    if down == "all_faults":
        proxy = FaultProxy(upstream.base_url, rate=1.0, faults=("http_503", "cut", "empty_choices"), seed=2)
    else:
        proxy = FaultProxy("http://127.0.0.1:9/v1", rate=0.0)     # port 9 (discard): nothing listens
    with proxy:
        api(proxy.base_url)
        record = seeded_trial(tmp_path)
    assert record.outcome == "infra_error" and not record.valid
    assert "gave up after 4 retries" in record.error
    assert proxy.requests == FAST_BACKEND["max_retries"] + 1


# Run in the pytester subprocess: the same fast-retry wrapper as the ``api`` fixture.
FAST_CONFTEST = f'''
import functools
import mltb_core.llm as llm
llm.make_backend = functools.partial(llm.make_backend, **{FAST_BACKEND!r})
'''
SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''


def test_outage_makes_the_item_error_and_is_tabled_apart(pytester, upstream, price_table, tmp_path, monkeypatch):
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAST_CONFTEST)
    with FaultProxy(upstream.base_url, rate=1.0, faults=("http_500",)) as proxy:
        monkeypatch.setenv("OPENAI_BASE_URL", proxy.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("MLTB_PRICES", str(price_table))
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--task={TASK}", f"--model=sim,openai:{MODEL_ID}", "--planner=react",
            "--max-iterations=3", "--infra-retries=0", "--no-llm-cache", f"--mltb-out={tmp_path / 'run'}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1, result.stdout.str()
    records = {r.model: r for r in read_records(tmp_path / "run" / "results.jsonl")}
    assert records[f"openai:{MODEL_ID}"].outcome == "infra_error"
    assert records["sim"].outcome in ("valid", "planner_failure")
    text = result.stdout.str()
    assert "Infrastructure errors (not counted against consistency)" in text
    infra_section = text[text.index("Infrastructure errors"):]
    assert f"openai:{MODEL_ID}" in infra_section and "gave up after" in infra_section


def test_a_context_overflow_ends_the_search_as_the_models_failure(api, tmp_path):
    """Issue 20: a path whose history outgrew the model's window gets HTTP 400 from the server. That is the
    search's own doing: the trial ends as a planner failure with the reason, not an infrastructure error.
    (The request is first sent again with older tool results trimmed, issue 33; here that overflows too.)"""
    from fake_openai_server import FakeOpenAIServer, error, tool_call_reply

    read = {"bindings": {}, "func_kwargs": {"filepath": "train.csv"}, "output": "train"}
    with FakeOpenAIServer(model_ids=(MODEL_ID,)) as server:
        overflow = error(400, "This model's maximum context length is 4096 tokens; your messages "
                              "resulted in 5012 tokens")
        server.enqueue(tool_call_reply("read_data", read), overflow, overflow)
        api(server.base_url)
        config = TrialConfig(planner="react", model=f"openai:{MODEL_ID}", max_iterations=5, llm_cache=False)
        record = run_trial(get_task(TASK), config, tmp_path)
    assert record.outcome == "planner_failure", record.error
    assert "context window" in record.stop_reason and record.stage_reached == 1
