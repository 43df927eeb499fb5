#!/usr/bin/env python3
"""rl_tenant.py: examples/rl_tenant in Python. Registers a gaussian head and asks nexusd for an
RL job (PPO or GRPO on a built-in task, or "NAME:task" of an external simulator such as
point_env.py): the daemon runs the rollouts and the updates; this prints progress and one JSON line.

    python examples/python/rl_tenant.py -s /tmp/nexus.sock -t dana --algorithm ppo --task reach --iterations 100

With --demos FILE (demonstrations of the task, e.g. `nexusctl dataset record --task push`) the head is
first warm-started by --warm-start-steps SFT steps on them, and the job keeps them in its loss with
--demo-weight (DAPG's behaviour-cloning term), as examples/rl_tenant does.
"""
import argparse
import json
import sys
import time

import nexus


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-s", "--socket", default="/run/nexus/nexusd.sock")
    p.add_argument("-t", "--tenant", required=True)
    p.add_argument("--algorithm", default="ppo", choices=["ppo", "grpo"])
    p.add_argument("--task", default="reach")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--horizon", type=int, default=32)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-staleness", type=int, default=2)
    p.add_argument("--synchronous", action="store_true",
                   help="collect, update, collect with the new version: every record on-policy")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--adapter-rank", type=int, default=0, choices=range(0, 65), metavar="0..64",
                   help="also train a low-rank adapter of this rank on every block of the backbone (0: the head alone)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--report-every", type=float, default=2.0, help="seconds between progress lines (0: none)")
    p.add_argument("--demos", help="demonstrations of the task (.hdf5): warm start and behaviour-cloning term")
    p.add_argument("--warm-start-steps", type=int, default=3000, help="with --demos: SFT steps of 32 before RL")
    p.add_argument("--eval-untrained", type=int, default=0,
                   help="with --demos: greedy success of the head before its warm start, in N episodes (an eval job)")
    p.add_argument("--demo-weight", type=float, default=0.0, help="with --demos: the term's weight (0: none)")
    a = p.parse_args()
    if not a.demos and (a.demo_weight or a.eval_untrained):
        p.error("--demo-weight and --eval-untrained need --demos")
    options = nexus.RlOptions(algorithm=a.algorithm, task=a.task, iterations=a.iterations, sessions=a.sessions,
                              horizon=a.horizon, group_size=a.group_size, max_staleness=a.max_staleness, seed=a.seed,
                              synchronous=a.synchronous)
    try:
        with nexus.Client.attach(a.tenant, socket_path=a.socket, timeout=60.0) as c:
            probe = c.env_open(a.task, 1)  # the head is sized from the task (reach: 4 and 2; Meta-World: 4 and 4)
            c.env_close(probe.ids)
            c.register(nexus.TenantSpec(seed=a.seed, optimizer=nexus.OptimizerSpec(lr=a.lr),
                                        head=nexus.HeadSpec(kind="gaussian", state_dim=probe.state_dim,
                                                            action_dim=probe.action_dim, chunk=1,
                                                            adapter=nexus.AdapterSpec(rank=a.adapter_rank))))
            warm_loss, untrained, untrained_success = None, 0, None
            if a.demos:
                if a.eval_untrained > 0:  # evaluated now: the tenant's later versions would evict it
                    untrained = c.publish()  # the head before its warm start
                    # The episodes eval_tenant runs by default (seed 90000 + i), so the figures compare.
                    job_id = c.job_start(nexus.JobSpec(kind="eval", task=a.task, version=untrained,
                                                       episodes=a.eval_untrained, seed=90000))
                    while (job := c.job(job_id)).state in ("queued", "running"):
                        time.sleep(0.5)
                    if job.state != "finished":
                        raise SystemExit(f"evaluating the untrained head: {job.error}")
                    untrained_success = job.success_rate
                c.dataset_load("demos", a.demos, seed=a.seed)
                for _ in range(a.warm_start_steps):
                    warm_loss = c.dataset_sft_step("demos", 32, 1).loss
                if a.demo_weight > 0:
                    options.demo_dataset, options.demo_weight = "demos", a.demo_weight
            first = c.rl_start(options)
            last_report = time.monotonic()
            while True:
                time.sleep(1.0)
                s = c.rl_status()
                if s.state == "running" and (not a.report_every or time.monotonic() - last_report < a.report_every):
                    continue
                last_report = time.monotonic()
                print(f"[{a.tenant}] {a.algorithm} {a.task} it {s.iterations}/{a.iterations} v{s.version}  "
                      f"{s.env_steps / max(s.seconds, 1e-9):.0f} steps/s  success {s.recent_success:.2f}  "
                      f"return {s.recent_return:.2f}  loss {s.policy_loss:.4f}", file=sys.stderr)
                if s.state != "running":
                    break
            print(json.dumps({"tenant": a.tenant, "adapter_rank": a.adapter_rank, "algorithm": a.algorithm,
                              "task": a.task, "state": s.state,
                              "error": s.error, "iterations": s.iterations, "first_version": first,
                              "version": s.version, "env_steps": s.env_steps, "episodes": s.episodes,
                              "recent_success": s.recent_success, "recent_return": s.recent_return,
                              "records_dropped": s.records_dropped, "records_behind": s.records_behind,
                              "seconds": s.seconds, "untrained_version": untrained,
                              "untrained_success": untrained_success,
                              "warm_start_steps": a.warm_start_steps if a.demos else 0,
                              "warm_start_loss": warm_loss, "demo_weight": a.demo_weight, "demo_loss": s.demo_loss,
                              "split_minibatches": s.split_minibatches,
                              "observation_bytes": s.observation_bytes}))
            return 0 if s.state == "done" else 1
    except nexus.Error as e:
        print(f"rl_tenant.py {a.tenant}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
