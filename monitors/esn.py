"""ESN ensemble per channel with a closed-form ridge readout, normalised surprise, per-channel CUSUM, max fusion.

Eqs. (2)-(6) of ../shared/seeds/002 §3: per channel c, K frozen sparse leaky-tanh reservoirs;
a ridge readout predicts x^{(c)}_{t+1} from [h_t; x_t; 1]; the surprise q^{(c)}_t is the mean
squared prediction error over the K members, normalised per dimension by the residual scale
measured out of fold on healthy training episodes; a one-sided CUSUM per channel integrates the
robust-z surprise and the score is the loudest channel. Causal by construction: s_t uses x_1..x_t.
"""

from __future__ import annotations

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
    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice]) -> EsnCusum:
        """Fit the readouts on healthy (T, dim) sequences; calibrate surprise out of fold."""
        if not healthy:
            raise ValueError("EsnCusum.fit needs at least one healthy episode")
        self.channels_ = list(slices)
        self._set_layout(slices, int(healthy[0].shape[1]))
        self._init_reservoirs()
        designs, row_episode = self._designs(healthy)  # per reservoir: (Z_r, Y_r) over all (episode, t) rows
        folds_of_episode = np.arange(len(healthy)) % max(2, min(self.n_folds, len(healthy)))
        row_fold = folds_of_episode[row_episode]
        residuals = [np.empty_like(y) for _, y in designs]
        for fold in np.unique(folds_of_episode):
            held_out = row_fold == fold
            readouts = self._solve(designs, ~held_out)
            for r, (z, y) in enumerate(designs):
                residuals[r][held_out] = np.einsum("ti,ij->tj", z[held_out], readouts[r]) - y[held_out]
        # Residual scale per reservoir output dimension, pooled over the K members of a channel.
        sigma = np.empty(self.out_dim_)
        for c in range(len(self.channels_)):
            pooled = np.vstack([residuals[r] for r in self._members(c)])
            scale = np.sqrt(np.mean(pooled ** 2, axis=0)) if len(pooled) else np.ones(pooled.shape[1])
            scale = np.maximum(scale, 1e-3 + 0.05 * float(np.mean(scale)) if scale.size else 1e-3)
            for r in self._members(c):
                sigma[self.out_slices_[r]] = scale
        self.inv_sigma_ = 1.0 / sigma
        # Calibration of the surprise q per channel, from the same out-of-fold residuals.
        q = np.zeros((len(row_episode), len(self.channels_)))
        for c in range(len(self.channels_)):
            for r in self._members(c):
                err = residuals[r] * self.inv_sigma_[self.out_slices_[r]]
                q[:, c] += np.mean(err ** 2, axis=1) / self.n_members
        # Standardise by the out-of-fold mean and standard deviation (not median/MAD): q is right-skewed,
        # and only a mean-centred z gives the CUSUM the negative drift (-kappa) it needs on healthy runs.
        center = q.mean(axis=0) if len(q) else np.zeros(len(self.channels_))
        spread = q.std(axis=0) if len(q) else np.ones(len(self.channels_))
        self.q_center_ = center
        self.q_scale_ = np.maximum(spread, 1e-6 + 0.1 * np.abs(center))
        self._build_readout(self._solve(designs, np.ones(len(row_episode), dtype=bool)))
        return self

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

    def _designs(self, seqs: Sequence[np.ndarray]) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """Per reservoir: inputs [h_t; x_t; 1] and targets x_{t+1} on its channel over every (episode, t < T-1)."""
        states = self._batch_states(seqs)
        rows = [(e, t) for e, seq in enumerate(seqs) for t in range(len(seq) - 1)]
        episode_of_row = np.array([e for e, _ in rows], dtype=int)
        time_of_row = np.array([t for _, t in rows], dtype=int)
        x_now = np.vstack([seq[:-1] for seq in seqs if len(seq) > 1]) if rows else np.zeros((0, self.dim_))
        x_next = np.vstack([seq[1:] for seq in seqs if len(seq) > 1]) if rows else np.zeros((0, self.dim_))
        ones = np.ones((len(rows), 1))
        designs = []
        for r in range(self.n_reservoirs_):
            sl = self.slices_[self.channels_[int(self.reservoir_channel_[r])]]
            h = states[episode_of_row, time_of_row, r]
            designs.append((np.hstack([h, x_now[:, sl], ones]), x_next[:, sl]))
        return designs, episode_of_row

    def _solve(self, designs: Sequence[tuple[np.ndarray, np.ndarray]], rows: np.ndarray) -> list[np.ndarray]:
        # einsum rather than `@` for the Gram matrices: these are a few hundred rows by a few dozen
        # columns, where multithreaded BLAS only adds contention (it tripled the fit on a busy machine).
        readouts = []
        for z_all, y_all in designs:
            z, y = z_all[rows], y_all[rows]
            gram = np.einsum("ti,tj->ij", z, z) + self.ridge * np.eye(z.shape[1])
            gram[-1, -1] -= self.ridge - 1e-8  # leave the intercept (nearly) unpenalised
            readouts.append(np.linalg.solve(gram, np.einsum("ti,tj->ij", z, y)))
        return readouts

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
        """Stack the readout over the block-diagonal recurrent weights: one matvec gives x-hat_{t+1} and W h_t.

        The stream then folds the surprise calibration into the pooling matrix; both exist to
        keep a step to a handful of numpy calls (the per-step budget is tens of microseconds).
        """
        rn = self.n_reservoirs_ * self.n_units
        recurrent = np.zeros((rn, self.readout_.shape[1]))
        for r in range(self.n_reservoirs_):
            block = slice(r * self.n_units, (r + 1) * self.n_units)
            recurrent[block, block] = self.w_[r]
        self.step_map_ = np.vstack([self.readout_, recurrent])
        self.pool_scaled_ = self.pool_ / self.q_scale_[:, None]
        self.offset_ = self.q_center_ / self.q_scale_ + self.kappa
        self.target_scale_ = self.inv_sigma_

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


class EsnCusumStream:
    """One episode: reservoir state, the previous step's prediction, and one CUSUM per channel.

    Hot path (per-step budget): about fifteen numpy calls on arrays of a few hundred floats, all
    members and channels batched (one stacked matvec for prediction and recurrence, one for input).
    """

    __slots__ = ("_m", "_z", "_h", "_pred", "_wh", "_cusum", "_rn", "_x")

    def __init__(self, model: EsnCusum) -> None:
        self._m = model
        self._rn = model.n_reservoirs_ * model.n_units
        self._z = np.zeros(self._rn + model.dim_ + 1)  # [h_t; x_t; 1], the readout's input
        self._z[-1] = 1.0
        self._h = self._z[:self._rn]
        self._x = self._z[self._rn:self._rn + model.dim_]
        self._pred: np.ndarray | None = None
        self._wh = np.zeros(self._rn)
        self._cusum = np.zeros(len(model.channels_))

    def update(self, x: np.ndarray) -> float:
        m = self._m
        if self._pred is not None:
            err = (self._pred - x[m.target_index_]) * m.target_scale_
            # S = max(0, S + z(q) - kappa), with z's median/scale folded into pool_scaled_ and offset_.
            self._cusum += m.pool_scaled_ @ (err * err)
            self._cusum -= m.offset_
            np.maximum(self._cusum, 0.0, out=self._cusum)
        pre = self._wh + m.w_in_ @ x
        np.tanh(pre, out=pre)
        pre *= m.leak
        self._h *= 1.0 - m.leak
        self._h += pre
        self._x[:] = x
        out = m.step_map_ @ self._z
        self._pred = out[:m.out_dim_]
        self._wh = out[m.out_dim_:]
        return float(self._cusum.max())

    def channel_scores(self) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self._m.channels_, self._cusum, strict=True)}
