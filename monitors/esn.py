"""ESN ensemble per channel with a closed-form ridge readout, normalised surprise, per-channel CUSUM, max fusion.

Eqs. (2)-(6) of ../shared/seeds/002 §3: per channel c, K frozen sparse leaky-tanh reservoirs;
a ridge readout predicts x^{(c)}_{t+1} from [h_t; x_t; 1]; the surprise q^{(c)}_t is the mean
squared prediction error over the K members, normalised per dimension by the residual scale
measured out of fold on healthy training episodes; a one-sided CUSUM per channel integrates the
robust-z surprise and the score is the loudest channel. Causal by construction: s_t uses x_1..x_t.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["EsnCusum", "EsnCusumStream"]


class EsnCusum:
    """ESN-ensemble surprise with one CUSUM per channel; the episode score is max over channels.

    Hyperparameters: `n_members` (K reservoirs per channel), `n_units` per reservoir, `leak`
    (alpha), `spectral_radius`, `density` of the recurrent weights, `input_scale`, `ridge`
    (readout regularisation), `kappa` (CUSUM drift allowance, in robust-z units), `n_folds`
    (cross-fit folds for the residual scale and the surprise calibration), `random_state`.
    """

    name = "esn_cusum_max"
    cumulative = True  # max over per-channel CUSUMs: 0 until one channel starts accumulating

    def __init__(self, n_members: int = 2, n_units: int = 12, leak: float = 0.5, spectral_radius: float = 0.9,
                 density: float = 0.25, input_scale: float = 0.5, ridge: float = 1.0, kappa: float = 0.5,
                 n_folds: int = 4, random_state: int = 0) -> None:
        self.n_members = n_members
        self.n_units = n_units
        self.leak = leak
        self.spectral_radius = spectral_radius
        self.density = density
        self.input_scale = input_scale
        self.ridge = ridge
        self.kappa = kappa
        self.n_folds = n_folds
        self.random_state = random_state

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("n_members", "n_units", "leak", "spectral_radius", "density",
                                              "input_scale", "ridge", "kappa", "n_folds", "random_state")}

    # ------------------------------------------------------------------ fit
    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
            folds: np.ndarray | None = None) -> EsnCusum:
        """Fit the readouts on healthy (T, dim) sequences; calibrate surprise out of fold (`folds`: the
        episodes' fold labels, default round-robin over `n_folds`)."""
        data = self._prepare(healthy, slices, folds)
        self._finish(data, excluded=())
        return self

    def crossfit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
                 folds: np.ndarray) -> list[np.ndarray]:
        """Each episode's per-step scores from the model fitted without its fold; leaves self fitted on all.

        One pass of reservoir states and one Gram matrix per fold serve every fit: the readout
        without folds F solves (G - sum_{f in F} G_f) A = B - sum_{f in F} B_f (all members of a
        channel in one batched solve), so the cross-fit costs a few small solves, not refits.
        """
        data = self._prepare(healthy, slices, folds)
        out: list[np.ndarray] = [np.zeros(0)] * len(healthy)
        for fold in np.unique(data.folds).tolist():
            readouts = self._finish(data, excluded=(fold,))
            for e in np.flatnonzero(data.folds == fold).tolist():
                out[e] = self._scores_from_rows(data, e, readouts)
        self._finish(data, excluded=())
        return out

    def _prepare(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
                 folds: np.ndarray | None) -> _FitData:
        if not healthy:
            raise ValueError("EsnCusum.fit needs at least one healthy episode")
        self.channels_ = list(slices)
        self._set_layout(slices, int(healthy[0].shape[1]))
        self._init_reservoirs()
        if folds is None:
            folds = np.arange(len(healthy)) % max(2, min(self.n_folds, len(healthy)))
        return _FitData(self, healthy, np.asarray(folds))

    def _finish(self, data: _FitData, excluded: tuple[int, ...]) -> list[np.ndarray]:
        """Calibrate and fit without the `excluded` folds; sets the model's state, returns the readouts."""
        kept_folds = [f for f in data.fold_ids if f not in excluded]
        # Out-of-fold residuals for each kept fold's rows: readouts fitted without it (and without `excluded`),
        # every fold's readouts in one batched solve per channel.
        inner = data.readouts_many([excluded + (fold,) for fold in kept_folds])
        sigma = np.empty(self.out_dim_)
        q_parts = []
        for c in range(len(self.channels_)):
            pooled = np.concatenate([data.residuals(c, inner[c][j], data.fold_rows[fold])
                                     for j, fold in enumerate(kept_folds)], axis=1)
            # Residual scale per output dimension, pooled over the K members of a channel.
            scale = np.sqrt(np.mean(pooled ** 2, axis=(0, 1))) if pooled.shape[1] else np.ones(pooled.shape[2])
            scale = np.maximum(scale, 1e-3 + 0.05 * float(np.mean(scale)) if scale.size else 1e-3)
            for r in self._members(c):
                sigma[self.out_slices_[r]] = scale
            # q: mean over members and dimensions of the normalised squared error, per row.
            q_parts.append(np.mean((pooled / scale) ** 2, axis=(0, 2)))
        self.inv_sigma_ = 1.0 / sigma
        q = np.column_stack(q_parts)
        # Standardise by the out-of-fold mean and standard deviation (not median/MAD): q is right-skewed,
        # and only a mean-centred z gives the CUSUM the negative drift (-kappa) it needs on healthy runs.
        center = q.mean(axis=0) if len(q) else np.zeros(len(self.channels_))
        spread = q.std(axis=0) if len(q) else np.ones(len(self.channels_))
        self.q_center_ = center
        self.q_scale_ = np.maximum(spread, 1e-6 + 0.1 * np.abs(center))
        readouts = [per_channel[0] for per_channel in data.readouts_many([excluded])]
        self._build_readout([readouts[c][k] for c in range(len(self.channels_)) for k in range(self.n_members)])
        return readouts

    def _scores_from_rows(self, data: _FitData, episode: int, readouts: list[np.ndarray]) -> np.ndarray:
        """An episode's per-step scores under `readouts` and the current calibration: the stream's values,
        from the prepared design rows (row t predicts step t + 1; step 0 scores 0)."""
        rows = data.episode_rows[episode]
        z = np.empty((rows.stop - rows.start, len(self.channels_)))
        for c in range(len(self.channels_)):
            err = data.residuals(c, readouts[c], rows) * self.inv_sigma_[self.out_slices_[self._members(c)[0]]]
            z[:, c] = (np.mean(err ** 2, axis=(0, 2)) - self.q_center_[c]) / self.q_scale_[c] - self.kappa
        scores = np.zeros(len(z) + 1)
        level = np.zeros(len(self.channels_))
        for t in range(len(z)):
            level = np.maximum(level + z[t], 0.0)
            scores[t + 1] = level.max()
        return scores

    def _set_layout(self, slices: dict[str, slice], dim: int) -> None:
        self.dim_ = dim
        self.slices_ = dict(slices)
        self.n_reservoirs_ = len(self.channels_) * self.n_members
        self.reservoir_channel_ = np.repeat(np.arange(len(self.channels_)), self.n_members)
        self.out_slices_: list[slice] = []
        start = 0
        for r in range(self.n_reservoirs_):
            sl = slices[self.channels_[int(self.reservoir_channel_[r])]]
            width = sl.stop - sl.start
            self.out_slices_.append(slice(start, start + width))
            start += width
        self.out_dim_ = start
        # For reservoir output j: which x component it predicts (x tiled once per member).
        self.target_index_ = np.concatenate(
            [np.arange(slices[self.channels_[int(c)]].start, slices[self.channels_[int(c)]].stop)
             for c in self.reservoir_channel_])
        pool = np.zeros((len(self.channels_), self.out_dim_))
        for r in range(self.n_reservoirs_):
            c = int(self.reservoir_channel_[r])
            sl = self.out_slices_[r]
            pool[c, sl] = 1.0 / ((sl.stop - sl.start) * self.n_members)
        self.pool_ = pool

    def _members(self, channel: int) -> range:
        return range(channel * self.n_members, (channel + 1) * self.n_members)

    def _init_reservoirs(self) -> None:
        rng = np.random.default_rng(self.random_state)
        n = self.n_units
        w = np.zeros((self.n_reservoirs_, n, n))
        w_in = np.zeros((self.n_reservoirs_ * n, self.dim_))
        for r in range(self.n_reservoirs_):
            dense = rng.uniform(-1.0, 1.0, (n, n)) * (rng.random((n, n)) < self.density)
            radius = float(np.max(np.abs(np.linalg.eigvals(dense)))) or 1.0
            w[r] = dense * (self.spectral_radius / radius)
            sl = self.slices_[self.channels_[int(self.reservoir_channel_[r])]]
            w_in[r * n:(r + 1) * n, sl] = rng.uniform(-self.input_scale, self.input_scale, (n, sl.stop - sl.start))
        self.w_ = w
        self.w_in_ = w_in

    def _states(self, seq: np.ndarray) -> np.ndarray:
        """Reservoir states h_t of one sequence, shape (T, R, N) (the batch form of the stream's update)."""
        return self._batch_states([seq])[0][: len(seq)]

    def _batch_states(self, seqs: Sequence[np.ndarray]) -> np.ndarray:
        """States of many sequences at once, shape (E, T_max, R, N); steps past an episode's end are padding."""
        t_max = max(len(s) for s in seqs)
        padded = np.zeros((len(seqs), t_max, self.dim_))
        for e, seq in enumerate(seqs):
            padded[e, : len(seq)] = seq
        drive = np.einsum("etd,nd->etn", padded, self.w_in_).reshape(len(seqs), t_max, self.n_reservoirs_, self.n_units)
        h = np.zeros((len(seqs), self.n_reservoirs_, self.n_units))
        out = np.empty((len(seqs), t_max, self.n_reservoirs_, self.n_units))
        for t in range(t_max):
            recurrent = np.einsum("rij,erj->eri", self.w_, h)
            h = (1.0 - self.leak) * h + self.leak * np.tanh(recurrent + drive[:, t])
            out[:, t] = h
        return out

    def _build_readout(self, readouts: list[np.ndarray]) -> None:
        """One dense map from [h (R*N); x (dim); 1] to every member's prediction (one matvec per step)."""
        n = self.n_units
        big = np.zeros((self.out_dim_, self.n_reservoirs_ * n + self.dim_ + 1))
        for r, a in enumerate(readouts):
            rows = self.out_slices_[r]
            sl = self.slices_[self.channels_[int(self.reservoir_channel_[r])]]
            width = sl.stop - sl.start
            big[rows, r * n:(r + 1) * n] = a[:n].T
            big[rows, self.n_reservoirs_ * n + sl.start:self.n_reservoirs_ * n + sl.stop] = a[n:n + width].T
            big[rows, -1] = a[-1]
        self.readout_ = big
        self._build_step_map()

    def _build_step_map(self) -> None:
        """One matrix per step: from [u_{t-1}; x_{t-1}; x_t; 1] to [e_t; 1; p_t], everything a step needs.

        e_t is the error of the prediction made at step t-1, already scaled by 1/sigma (the readout
        of [h_{t-1}; x_{t-1}; 1] minus the scaled targets in x_t); p_t = W h_{t-1} + W_in x_t is the
        reservoirs' pre-activation. The reservoir state is kept as u = h / leak, so the leaky update
        is u_t = (1 - leak) u_{t-1} + tanh(p_t) and the leak moves into the h columns. The constant
        row's 1 carries the channels' offsets (z-score center and kappa) through the pooling matrix.
        `step_maps_` holds the matrix twice, x_{t-1} and x_t in swapped column blocks, so a stream
        writes each x once, alternating blocks (the per-step budget is tens of microseconds: the
        stream is a handful of numpy calls, one matvec).
        """
        rn, dim, od = self.n_reservoirs_ * self.n_units, self.dim_, self.out_dim_
        recurrent = np.zeros((rn, rn))
        for r in range(self.n_reservoirs_):
            block = slice(r * self.n_units, (r + 1) * self.n_units)
            recurrent[block, block] = self.w_[r]
        scaled = self.readout_ * self.inv_sigma_[:, None]
        targets = np.zeros((od, dim))
        targets[np.arange(od), self.target_index_] = -self.inv_sigma_
        maps = []
        for current in (0, 1):  # step_maps_[b]: x_t in block b, x_{t-1} in the other
            previous = 1 - current
            step = np.zeros((od + 1 + rn, rn + 2 * dim + 1))
            blocks = [slice(rn, rn + dim), slice(rn + dim, rn + 2 * dim)]
            step[:od, :rn] = scaled[:, :rn] * self.leak
            step[:od, blocks[previous]] = scaled[:, rn:rn + dim]
            step[:od, blocks[current]] = targets
            step[:od, -1] = scaled[:, -1]
            step[od, -1] = 1.0
            step[od + 1:, :rn] = recurrent * self.leak
            step[od + 1:, blocks[current]] = self.w_in_
            maps.append(step)
        self.step_maps_ = tuple(maps)
        self.pool_step_ = np.hstack([self.pool_ / self.q_scale_[:, None],
                                     -(self.q_center_ / self.q_scale_ + self.kappa)[:, None]])

    # ------------------------------------------------------------------ state for model files
    def get_state(self) -> dict[str, np.ndarray]:
        return {"w": self.w_, "w_in": self.w_in_, "readout": self.readout_, "inv_sigma": self.inv_sigma_,
                "q_center": self.q_center_, "q_scale": self.q_scale_}

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None:
        self.channels_ = list(slices)
        self._set_layout(slices, int(state["w_in"].shape[1]))
        # The settings size what _build_step_map allocates: they must match the arrays (a model file can lie).
        rn = self.n_reservoirs_ * self.n_units
        expected = {"w": (self.n_reservoirs_, self.n_units, self.n_units), "w_in": (rn, self.dim_),
                    "readout": (self.out_dim_, rn + self.dim_ + 1), "inv_sigma": (self.out_dim_,),
                    "q_center": (len(self.channels_),), "q_scale": (len(self.channels_),)}
        for key, shape in expected.items():
            if state[key].shape != shape:
                raise ValueError(f"ESN state {key!r} has shape {state[key].shape}, its settings make {shape}")
        self.w_, self.w_in_, self.readout_ = state["w"], state["w_in"], state["readout"]
        self.inv_sigma_, self.q_center_, self.q_scale_ = state["inv_sigma"], state["q_center"], state["q_scale"]
        self._build_step_map()

    def start(self) -> EsnCusumStream:
        return EsnCusumStream(self)


class _FitData:
    """Everything a fit needs once: per channel, the design rows [h_t; x_t; 1] of all K members and the targets
    x_{t+1}, ordered by fold (so a fold's rows, and an episode's, are one slice), and per fold the Gram matrices
    G_f = Z_f' Z_f and B_f = Z_f' Y_f (all members batched)."""

    def __init__(self, model: EsnCusum, healthy: Sequence[np.ndarray], folds: np.ndarray) -> None:
        self.model = model
        self.folds = folds
        self.fold_ids: list[int] = np.unique(folds).tolist()
        states = model._batch_states(healthy)
        order = np.argsort(folds, kind="stable")
        self.episode_rows: dict[int, slice] = {}
        self.fold_rows: dict[int, slice] = {}
        row_episode: list[int] = []
        row_time: list[int] = []
        for e in order.tolist():
            start = len(row_episode)
            row_episode += [e] * (len(healthy[e]) - 1)
            row_time += range(len(healthy[e]) - 1)
            self.episode_rows[e] = slice(start, len(row_episode))
        episode_index = np.array(row_episode, dtype=np.int64)
        time_index = np.array(row_time, dtype=np.int64)
        for fold in self.fold_ids:
            members = [self.episode_rows[e] for e in np.flatnonzero(folds == fold).tolist()]
            self.fold_rows[fold] = slice(min(m.start for m in members), max(m.stop for m in members))
        x = np.zeros((len(row_episode), model.dim_))
        x_next = np.zeros_like(x)
        for e, rows in self.episode_rows.items():
            x[rows], x_next[rows] = healthy[e][:-1], healthy[e][1:]
        k = model.n_members
        row_states = states[episode_index, time_index]  # (rows, R, N)
        self.designs: list[np.ndarray] = []  # per channel (K, rows, F)
        self.targets: list[np.ndarray] = []  # per channel (rows, width)
        self.fold_grams: list[np.ndarray] = []  # per channel (folds, K, F, F)
        self.fold_cross: list[np.ndarray] = []  # per channel (folds, K, F, width)
        for c, name in enumerate(model.channels_):
            sl = model.slices_[name]
            inputs = np.broadcast_to(np.hstack([x[:, sl], np.ones((len(x), 1))]), (k, len(x), sl.stop - sl.start + 1))
            z = np.concatenate([row_states[:, c * k:(c + 1) * k].transpose(1, 0, 2), inputs], axis=2)
            y = x_next[:, sl]
            self.designs.append(z)
            self.targets.append(y)
            # einsum rather than `@` for the Gram matrices: a few hundred rows by a few dozen columns, where
            # multithreaded BLAS only adds contention on a busy machine.
            self.fold_grams.append(np.stack([np.einsum("kti,ktj->kij", z[:, self.fold_rows[f]], z[:, self.fold_rows[f]])
                                             for f in self.fold_ids]))
            self.fold_cross.append(np.stack([np.einsum("kti,tj->kij", z[:, self.fold_rows[f]], y[self.fold_rows[f]])
                                             for f in self.fold_ids]))

    def readouts_many(self, exclusions: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
        """Per channel (exclusions, K, F, width): the ridge readouts fitted without each exclusion's folds, one
        batched solve per channel: (sum of all folds' G - sum of the excluded ones') A = (same for B)."""
        kept = np.array([[0.0 if f in ex else 1.0 for f in self.fold_ids] for ex in exclusions])
        out = []
        for grams, cross in zip(self.fold_grams, self.fold_cross, strict=True):
            f = grams.shape[-1]
            penalty = self.model.ridge * np.eye(f)
            penalty[-1, -1] = 1e-8  # leave the intercept (nearly) unpenalised
            out.append(np.linalg.solve(np.einsum("ef,fkij->ekij", kept, grams) + penalty,
                                       np.einsum("ef,fkij->ekij", kept, cross)))
        return out

    def residuals(self, channel: int, readout: np.ndarray, rows: slice) -> np.ndarray:
        """(K, rows, width): each member's prediction error on a slice of rows."""
        return np.matmul(self.designs[channel][:, rows], readout) - self.targets[channel][rows]


class EsnCusumStream:
    """One episode: reservoir state, the last two steps' x, and one CUSUM per channel.

    Hot path (per-step budget): seven numpy calls on arrays of a few hundred floats, all members
    and channels batched (`EsnCusum._build_step_map`): write x_t, one matvec for the prediction
    error and the reservoirs' pre-activation, square, pool into the channels' CUSUM increments,
    tanh and the leaky update of the state.
    """

    __slots__ = ("_m", "_z", "_u", "_slots", "_maps", "_out", "_err", "_pre", "_cusum", "_keep", "_pool", "_t")

    def __init__(self, model: EsnCusum) -> None:
        self._m = model
        rn, dim, od = model.n_reservoirs_ * model.n_units, model.dim_, model.out_dim_
        self._z = np.zeros(rn + 2 * dim + 1)  # [u_{t-1}; x in two alternating blocks; 1], u = h / leak
        self._z[-1] = 1.0
        self._u = self._z[:rn]
        self._slots = (self._z[rn:rn + dim], self._z[rn + dim:rn + 2 * dim])
        self._maps = model.step_maps_
        self._out = np.empty(od + 1 + rn)  # [e_t; 1; p_t]
        self._err = self._out[:od + 1]
        self._pre = self._out[od + 1:]
        self._cusum = [0.0] * len(model.channels_)  # a handful of channels: plain floats beat numpy calls
        self._keep = 1.0 - model.leak
        self._pool = model.pool_step_
        self._t = 0

    def update(self, x: np.ndarray) -> float:
        t = self._t
        self._t = t + 1
        current = t & 1  # the block that takes x_t; the other holds x_{t-1} (zeros at t = 0)
        self._slots[current][:] = x
        np.dot(self._maps[current], self._z, out=self._out)
        if t:
            err = self._err
            np.multiply(err, err, out=err)
            # S = max(0, S + z(q) - kappa), z's center and scale (and kappa) folded into the pooling matrix.
            self._cusum = [level if level > 0.0 else 0.0
                           for level in map(operator.add, self._cusum, self._pool.dot(err).tolist())]
        pre = self._pre
        np.tanh(pre, out=pre)
        u = self._u
        u *= self._keep
        u += pre
        return max(self._cusum)

    def state(self) -> np.ndarray:
        """The reservoir states h_t after the last update, shape (R, N) (as `EsnCusum._states` gives them)."""
        m = self._m
        return (self._u * m.leak).reshape(m.n_reservoirs_, m.n_units)

    def channel_scores(self) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self._m.channels_, self._cusum, strict=True)}
