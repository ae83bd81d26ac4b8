"""`determinism --certify`'s plan: request count and wall time for 20 prompts at
--max-batch 32 against the scripted lab (llama.cpp dialect), split by factor, so the
part that dominates is named. The lab answers at once: the time is the client's and
the loopback's; on a real server multiply each factor's rounds by its latency."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

from _common import save

from quantcheck.fetch.certify import CertifySettings, PlanSender, client_for, server_facts
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.store.records.run_records import Prompt
from quantcheck.triage.certify_plan import make_plan


def prompts(count: int) -> list[Prompt]:
    return [Prompt(id=f"p{n}", category="c", api="chat", hash=f"h{n}",
                   request={"messages": [{"role": "user", "content": f"question {n}"}],
                            "max_tokens": 16, "temperature": 0})
            for n in range(count)]


async def measure(url: str, count: int, max_batch: int, trials: int) -> dict[str, object]:
    settings = CertifySettings(endpoint=url, top_logprobs=20)
    asked = prompts(count)
    async with client_for(settings) as client:
        facts = await server_facts(client, None)
        plan = make_plan([p.id for p in asked], trials, max_batch, 0, facts.context_tokens, 16)
        sender = PlanSender(client, settings, facts, asked)
        await sender.check_cache_control()
        await sender.check_seed(plan)
        seconds: Counter[str] = Counter()
        requests: Counter[str] = Counter()
        rounds: Counter[str] = Counter()
        started = time.perf_counter()
        for round_ in plan.rounds:
            factor = round_.probes[-1].factor
            begun = time.perf_counter()
            await sender.send_round(round_)
            seconds[factor] += time.perf_counter() - begun
            requests[factor] += len(round_.probes)
            rounds[factor] += 1
        wall = time.perf_counter() - started
    dominant = max(seconds, key=lambda f: seconds[f])
    return {"prompts": count, "max_batch": max_batch, "trials": trials,
            "requests": plan.requests, "rounds": len(plan.rounds), "wall_s": round(wall, 2),
            "failed": sender.failed,
            "by_factor": {f: {"requests": requests[f], "rounds": rounds[f],
                              "seconds": round(seconds[f], 2)} for f in requests},
            "dominant": dominant,
            "dominant_share": round(seconds[dominant] / wall, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    with ScriptedServer(ScriptedModel(), dialect="llama.cpp") as server:
        figures = asyncio.run(measure(server.url, args.prompts, args.max_batch, args.trials))
    print(f"{figures['requests']} requests in {figures['rounds']} rounds, "
          f"{figures['wall_s']} s on the scripted lab")
    for factor, row in figures["by_factor"].items():  # type: ignore[attr-defined]
        print(f"  {factor}: {row['requests']} requests, {row['rounds']} rounds, "
              f"{row['seconds']} s")
    print(f"dominant: {figures['dominant']} ({figures['dominant_share']:.0%} of the time)")
    print(f"written: {save('certify_plan', figures)}")


if __name__ == "__main__":
    main()
