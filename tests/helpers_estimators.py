"""Test helpers for the estimators: random ALFWorld-shaped batches and a literal, loop-by-loop
re-statement of docs/estimators.md to check the vectorised implementation against.

The literal version is deliberately naive (dicts, per-row loops, exact SVD) and reads the spec
top to bottom; it expects rows of each trajectory in time order and no padding.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ccpo_cli.arms import Arm
from ccpo_cli.estimators import RolloutBatch

EPS = 1e-6


def random_batch(
    seed: int,
    n_tasks: int = 3,
    trajectories: int = 4,
    max_turns: int = 6,
    n_obs: int = 4,
    d: int = 12,
    response_length: int = 5,
    success_rate: float = 0.5,
    invalid_rate: float = 0.15,
    pad_rows: int = 0,
) -> RolloutBatch:
    """A small batch with shared observations (revisits included), invalid turns and features."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list] = defaultdict(list)
    for task in range(n_tasks):
        for traj in range(trajectories):
            turns = int(rng.integers(1, max_turns + 1))
            success = rng.random() < success_rate
            for t in range(turns):
                columns["uid"].append(f"task{task}")
                columns["traj_uid"].append(f"task{task}-traj{traj}")
                columns["anchor_obs"].append(f"obs{int(rng.integers(0, n_obs))}" if t else "start")
                columns["step_index"].append(t)
                columns["env_reward"].append(10.0 if (success and t == turns - 1) else 0.0)
                columns["is_action_valid"].append(bool(rng.random() > invalid_rate))
                columns["episode_reward"].append(10.0 if success else 0.0)
                length = int(rng.integers(1, response_length + 1))
                columns["response_mask"].append([1] * length + [0] * (response_length - length))
                columns["is_pad"].append(False)
    n = len(columns["uid"])
    for _ in range(pad_rows):
        source = int(rng.integers(0, n))
        for key in list(columns):
            columns[key].append(columns[key][source])
        columns["is_pad"][-1] = True
    data = {
        key: np.array(values) if key != "response_mask" else np.array(values)
        for key, values in columns.items()
    }
    data["phi_feats"] = rng.standard_normal((len(data["uid"]), d)).astype(
        np.float32
    ) + 3.0 * rng.standard_normal(d).astype(np.float32)
    return RolloutBatch.from_mapping(data, source="random batch")


# ---- the literal spec ------------------------------------------------------------------------


def _norm(mode, values):
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 1:
        mean, sd = 0.0, 1.0
    else:
        mean, sd = values.mean(), values.std(ddof=1)
    return (values - mean) if mode == "mean_norm" else (values - mean) / (sd + EPS)


def _therm(x, lo, hi):
    v = np.zeros(12)
    k = int(np.clip((x - lo) / max(hi - lo, 1e-9), 0, 1) * 12)
    v[:k] = 1
    return v


def literal_advantages(batch: RolloutBatch, arm: Arm) -> np.ndarray:
    """Per-row final advantages, following the spec text line by line."""
    n = batch.n_rows
    uid = [str(x) for x in batch.uid]
    traj = [str(x) for x in batch.traj_uid]
    obs = [str(x) for x in batch.anchor_obs]
    valid = batch.is_action_valid.astype(float)
    rows_of_traj = defaultdict(list)
    for i in range(n):
        rows_of_traj[traj[i]].append(i)
    rows_of_task = defaultdict(list)
    for i in range(n):
        rows_of_task[uid[i]].append(i)

    # returns, penalty, scores
    rtg = np.zeros(n)
    for rows in rows_of_traj.values():
        running = 0.0
        for i in reversed(rows):
            running = batch.env_reward[i] + arm.gamma * running
            rtg[i] = running
    G = rtg - arm.invalid_penalty * (1 - valid)
    sigma = batch.episode_reward - arm.invalid_penalty * (1 - valid)

    episode = np.zeros(n)
    for rows in rows_of_task.values():
        episode[rows] = _norm(arm.adv_mode, sigma[rows])
    if arm.estimator == "grpo":
        return arm.ep_w * episode

    if arm.estimator == "gigpo":
        step = np.zeros(n)
        groups = defaultdict(list)
        for i in range(n):
            groups[(uid[i], obs[i])].append(i)
        for rows in groups.values():
            if len(rows) > 1:
                values = G[rows]
                step[rows] = (
                    (values - values.mean())
                    if arm.adv_mode == "mean_norm"
                    else (values - values.mean()) / (values.std(ddof=1) + EPS)
                )
        return arm.ep_w * episode + arm.step_advantage_w * step

    # node values
    acc, cnt = defaultdict(float), defaultdict(int)
    node_next = {}
    for rows in rows_of_traj.values():
        T = len(rows)
        R = batch.episode_reward[rows[0]]
        for t, i in enumerate(rows):
            acc[(uid[i], obs[i])] += arm.gamma ** (T - t) * R
            cnt[(uid[i], obs[i])] += 1
            node_next[i] = (
                (uid[i], obs[rows[t + 1]])
                if t + 1 < T
                else ("terminal", abs(R - arm.success_reward) < 1e-9)
            )
    V = {key: acc[key] / cnt[key] for key in acc}
    V[("terminal", True)] = arm.success_reward
    V[("terminal", False)] = 0.0
    v_next = np.array([V[node_next[i]] for i in range(n)])
    v_cur = np.array([V[(uid[i], obs[i])] for i in range(n)])
    Y = (
        v_next - arm.invalid_penalty * (1 - valid)
        if arm.target == "nextnode"
        else G.astype(np.float64)
    )

    # features
    phi = None
    if batch.phi_feats is not None:
        X = batch.phi_feats.astype(np.float64)
        X = X - X.mean(0)
        if arm.whiten > 0 and n > arm.whiten:
            centred_norms = np.linalg.norm(X, axis=1)
            _, _, vt = np.linalg.svd(X, full_matrices=False)
            X = X - X @ vt[: arm.whiten].T @ vt[: arm.whiten]
            X[np.linalg.norm(X, axis=1) <= 1e-6 * centred_norms] = 0.0  # rounding residue is zero
        X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-9)
        if arm.phi == "hidden+ctx" and arm.ctx_w > 0:
            ctx = np.zeros((n, 37))
            for rows in rows_of_traj.values():
                seen = set()
                for t, i in enumerate(rows):
                    rev = obs[i] in seen
                    seen.add(obs[i])
                    nu = len(seen)
                    ctx[i] = np.concatenate(
                        [
                            _therm(t, 0, 30),
                            _therm(nu, 0, 25),
                            _therm(nu / (t + 1), 0, 1),
                            [float(rev)],
                        ]
                    )
            ctx = ctx / np.maximum(np.linalg.norm(ctx, axis=1, keepdims=True), 1e-9)
            X = np.concatenate([X, arm.ctx_w * ctx], axis=1)
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-9)
        phi = X

    if arm.gate == "global":
        levels = [(lambda i: (uid[i],), arm.rho)]
    else:
        levels = [(lambda i: (uid[i], obs[i]), arm.rho)]
        if arm.backoff_task:
            levels.append((lambda i: (uid[i],), arm.rho * arm.backoff_rho))
    live = np.zeros(n, dtype=bool)
    records = []
    for level, (key_of, rho) in enumerate(levels):
        buckets = defaultdict(list)
        for i in range(n):
            buckets[key_of(i)].append(i)
        for members in buckets.values():
            todo = [i for i in members if not live[i]]
            if not todo or len({traj[i] for i in members}) < arm.min_traj:
                continue
            if phi is not None:
                F = phi[members]
                sq = (F * F).sum(1)
                D2 = sq[:, None] + sq[None, :] - 2 * F @ F.T
                D2[D2 <= 1e-4] = 0.0  # identical features up to rounding are at distance 0
                D = np.sqrt(D2)
                off = D[np.triu_indices(len(members), 1)]
                med = float(np.median(off)) if off.size else 0.0
                tau = (med if med > 1e-9 else 1.0) * max(arm.tau, 1e-6)
            for i in todo:
                a = members.index(i)
                other = [b for b in range(len(members)) if traj[members[b]] != traj[i]]
                if not other:
                    continue
                Yo = Y[[members[b] for b in other]]
                if phi is not None:
                    if arm.wmode == "soft":
                        w = np.exp(-D[a, other] / tau)
                    elif arm.wmode == "hard":
                        w = (D[a, other] <= tau * (1 + 1e-6)).astype(float)
                    else:
                        cos = (
                            F[other]
                            @ F[a]
                            / np.maximum(
                                np.linalg.norm(F[a])
                                * np.maximum(np.linalg.norm(F[other], axis=1), 1e-12),
                                1e-12,
                            )
                        )
                        w = np.where(cos > 5e-5, cos, 0.0)  # a cosine within 5e-5 of 0 is rounding
                    if arm.wmode != "soft" and w.sum() <= 0:
                        # every nearest other-trajectory row, squared distances within 1e-4 counting as equal
                        d2 = D[a, other] ** 2
                        w = (d2 <= d2.min() + 1e-4).astype(float)
                    bK = float((w * Yo).sum() / max(w.sum(), 1e-12))
                    alpha = defaultdict(float)
                    for k, b in enumerate(other):
                        alpha[traj[members[b]]] += w[k]
                    al = np.array(list(alpha.values()))
                    neff = al.sum() ** 2 / max((al**2).sum(), 1e-12)
                    wn = w / max(w.sum(), 1e-12)
                    local = float(np.sqrt(max((wn * (Yo - bK) ** 2).sum(), 0)))
                else:
                    bK, neff, local = float(Yo.mean()), 1.0, 0.0
                J = len({traj[members[b]] for b in other})
                s2 = float(np.var(Yo)) if len(Yo) > 1 else 0.0
                vg = max(1 / max(neff, 1e-9) - 1 / max(J, 1e-9), 0)
                records.append(
                    dict(
                        i=i,
                        level=level,
                        bK=bK,
                        bU=float(Yo.mean()),
                        s2=s2,
                        vg=vg,
                        J=J,
                        rho=rho,
                        local=local,
                    )
                )
                live[i] = True

    if records:
        d2 = np.array([(r["rho"] * (r["bU"] - r["bK"])) ** 2 for r in records])
        vd = np.array([r["rho"] ** 2 * r["s2"] * r["vg"] for r in records])
        pooled = 0.0 if d2.mean() <= 1e-12 else min(1, max(0, 1 - vd.mean() / d2.mean()))
        tau2 = max(0.0, d2.mean() - vd.mean())
    prior = {}
    if (arm.prior_kappa > 0 or arm.lk_fix is not None) and arm.gate != "global":
        for i in range(n):
            pool = [Y[k] for k in rows_of_task[uid[i]] if traj[k] != traj[i]]
            prior[i] = float(np.mean(pool)) if pool else float("nan")
    batch_sd = float(np.std(Y)) if n > 1 else 1.0
    batch_sd = 1.0 if batch_sd < 1e-9 else batch_sd
    cc = np.zeros(n)
    for r in records:
        d = r["rho"] * (r["bU"] - r["bK"])
        if arm.gate == "global":
            lam = 1.0
        elif arm.shrink == "eb":
            lam = 0.0 if abs(d) < 1e-12 else 1 - r["s2"] * r["vg"] / d**2
        elif arm.shrink == "mse":
            B = r["rho"] * 0.30 * (np.sqrt(r["s2"]) + 1e-9)
            lam = B**2 / (B**2 + r["s2"] * r["vg"] + 1e-12)
        elif arm.shrink == "eb_pooled":
            lam = pooled
        else:
            v = r["rho"] ** 2 * r["s2"] * r["vg"]
            lam = 0.0 if tau2 + v <= 1e-12 else tau2 / (tau2 + v)
        if arm.lam_fix is not None:
            lam = arm.lam_fix
        lam = min(1.0, max(0.0, lam))
        b = lam * r["bK"] + (1 - lam) * r["bU"]
        i = r["i"]
        if prior and r["level"] == 0 and np.isfinite(prior[i]):
            lk = (
                r["J"] / (r["J"] + arm.prior_kappa)
                if arm.lk_fix is None
                else min(1, max(0, arm.lk_fix))
            )
            b = lk * b + (1 - lk) * prior[i]
        a = Y[i] - b
        if arm.std == "local":
            a /= max(r["local"], arm.std_floor * batch_sd)
        if arm.jweight_c > 0:
            a *= r["J"] / (r["J"] + arm.jweight_c)
        cc[i] = a
    if arm.edge_w > 0:
        gain = v_next - v_cur
        for rows in rows_of_task.values():
            if len(rows) > 1:
                g = gain[rows]
                cc[rows] += arm.edge_w * (g - g.mean()) / (g.std(ddof=1) + EPS)
    step = cc.astype(np.float32).astype(np.float64)
    on = arm.step_norm == "std" or (arm.step_norm == "mode" and arm.adv_mode == "mean_std_norm")
    if on:
        for rows in rows_of_task.values():
            lr = [i for i in rows if live[i]]
            if len(lr) >= 2:
                x = step[lr]
                step[lr] = (x - x.mean()) / (x.std(ddof=1) + EPS)
    return arm.ep_w * episode + arm.step_advantage_w * step
