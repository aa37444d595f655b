"""Feature vectors φ for the CCPO kernel: batch-wide whitening plus the optional context block.

Whitening (docs/estimators.md §5.4): centre the columns, remove the top-k right singular directions of the
centred matrix, divide each row by max(‖row‖, 1e-9). The reference takes a full SVD for the k
directions, which dominates its cost. Here the same subspace comes from block subspace iteration:
float32 sweeps until the subspace is within about 1e-6, then float64 sweeps (exact products of the
same float32 matrix) until the refined basis is bounded within 5e-7 of the exact one; an exact SVD
is the fallback when the spectrum has no usable gap. Every pass over the rows runs as two fixed
row blocks side by side (blas.side_by_side).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ccpo_cli.estimators.blas import SideBySide, side_by_side, usual_blas_threads

_OVERSAMPLE = (
    29  # block width k + 29: a wide block costs little more per pass and converges much faster
)
_CHUNK_ROWS = 256
_FLOAT32_TARGET = 1e-6  # predicted subspace error at which float32 sweeps hand over to float64
_ACCEPTED_ERROR = 5e-7  # bound on sin(largest principal angle) to the exact top-k subspace
_MAX_FLOAT32_SWEEPS = 30
_MAX_FLOAT64_SWEEPS = 8
_NO_GAP = 0.81  # (σ_width / σ_k)² at or above this: iteration would crawl, take the exact SVD
# Relative size below which a row's part outside the top-k subspace counts as rounding residue.
RESIDUE_TOLERANCE = 1e-6


def _subspace_change(new: np.ndarray, old: np.ndarray) -> float:
    """sin of the largest principal angle between two orthonormal bases (float64)."""
    residual = new - old @ (old.T @ new)
    return float(np.sqrt(max(np.linalg.eigvalsh(residual.T @ residual)[-1], 0.0)))


# Tall-skinny QR and SVD through small Gram matrices: LAPACK on a d × 32 panel is slow and, on a
# busy machine, stalls its threads; the 32 × 32 problems below cost nothing.


def _orthonormal_columns(panel: np.ndarray) -> np.ndarray:
    """Q with panel = Q·R, Q orthonormal, by two rounds of Cholesky QR (float64)."""
    basis = panel
    for _ in range(2):
        try:
            lower = np.linalg.cholesky(basis.T @ basis)
        except np.linalg.LinAlgError:
            return np.linalg.qr(basis)[0]
        basis = basis @ np.linalg.inv(lower).T
    return basis


def _left_singular_pairs(panel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left singular vectors and singular values (descending) of a tall panel (float64)."""
    eigenvalues, eigenvectors = np.linalg.eigh(panel.T @ panel)
    order = np.argsort(eigenvalues)[::-1]
    values = np.sqrt(np.maximum(eigenvalues[order], 0.0))
    vectors = panel @ eigenvectors[:, order]
    vectors /= np.where(values > 0, values, 1.0)
    return _orthonormal_columns(vectors) if np.all(values > 0) else vectors, values


def _exact_directions(features: np.ndarray, mean: np.ndarray, k: int) -> np.ndarray:
    centred = features.astype(np.float64) - mean
    with usual_blas_threads():
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[:k].T.copy()


def _column_mean(features: np.ndarray, workers: SideBySide) -> np.ndarray:
    """Column means in float64 (block sums added in a fixed order)."""
    return (
        workers.sum_over_rows(
            features.shape[0], lambda lo, hi: features[lo:hi].sum(axis=0, dtype=np.float64)
        )
        / features.shape[0]
    )


def _squared_row_norms(rows: np.ndarray, workers: SideBySide) -> np.ndarray:
    return np.concatenate(
        workers.over_rows(
            rows.shape[0],
            lambda lo, hi: np.einsum("ij,ij->i", rows[lo:hi], rows[lo:hi], dtype=np.float64),
        )
    )


def _centred_float32(features: np.ndarray, mean: np.ndarray, workers: SideBySide) -> np.ndarray:
    """features − mean in float32, each element rounded on its own.

    Subtracting float32(mean) alone would shift every row by that mean's rounding, up to ~1e-3 on
    the huge near-constant coordinates of final-norm hidden states, and the normalised rows would
    keep the shift; the second, tiny subtraction takes it out.
    """
    mean32 = mean.astype(np.float32)
    rounding = (mean - mean32).astype(np.float32)
    centred = np.empty_like(features)

    def centre(lo: int, hi: int) -> None:
        np.subtract(features[lo:hi], mean32, out=centred[lo:hi])
        centred[lo:hi] -= rounding

    workers.over_rows(features.shape[0], centre)
    return centred


def _normal_product(centred: np.ndarray, basis: np.ndarray, workers: SideBySide) -> np.ndarray:
    """XᵀX·basis in the basis's precision (float64 products read the float32 rows exactly)."""
    n, d = centred.shape
    if basis.dtype == centred.dtype:
        return workers.sum_over_rows(n, lambda lo, hi: centred[lo:hi].T @ (centred[lo:hi] @ basis))

    def widened(lo: int, hi: int) -> np.ndarray:
        buffer = np.empty((min(_CHUNK_ROWS, hi - lo), d), dtype=basis.dtype)
        product = np.zeros((d, basis.shape[1]), dtype=basis.dtype)
        for start in range(lo, hi, _CHUNK_ROWS):
            chunk = buffer[: min(_CHUNK_ROWS, hi - start)]
            chunk[...] = centred[start : start + chunk.shape[0]]
            product += chunk.T @ (chunk @ basis)
        return product

    return workers.sum_over_rows(n, widened)


def _sweep(
    centred: np.ndarray, basis: np.ndarray, k: int, workers: SideBySide
) -> tuple[np.ndarray, float]:
    """One subspace-iteration step: the new orthonormal basis (float64) and its contraction
    λ_width / λ_k, the factor by which the error shrinks per step (inf when λ_k is 0)."""
    refined, values = _left_singular_pairs(
        _normal_product(centred, basis, workers).astype(np.float64)
    )
    # values are singular values of XᵀX·V, i.e. already squared ones of X
    contraction = values[-1] / values[k - 1] if values[k - 1] > 0 else np.inf
    return refined, contraction


def _iterated_directions(
    centred: np.ndarray, k: int, workers: SideBySide, seed: int = 0
) -> np.ndarray | None:
    """Top-k right singular vectors of the centred rows by subspace iteration; None when it cannot
    vouch for them (then the caller takes the exact SVD).

    A step from V to V' changes the leading k columns by `change`; with contraction c the error of
    V is at most change / (1 − c) and that of V' at most c times it. The float64 check credits a
    step with only √c, for safety, since c is itself estimated from the block.
    """
    n, d = centred.shape
    width = min(k + _OVERSAMPLE, n, d)
    basis = np.random.default_rng(seed).standard_normal((d, width)).astype(np.float32)
    previous: np.ndarray | None = None
    last_change = np.inf
    for sweep in range(_MAX_FLOAT32_SWEEPS):
        refined, contraction = _sweep(centred, basis, k, workers)
        if (
            sweep >= 2 and contraction >= _NO_GAP
        ):  # (a random start can look gapless for a sweep or two)
            return None
        basis = refined.astype(np.float32)
        if previous is not None:
            change = _subspace_change(refined[:, :k], previous)
            # stop at the target (predicted only where there is a gap), or once float32 rounding
            # stops the progress
            predicted = (
                contraction * change / (1.0 - contraction) if contraction < _NO_GAP else np.inf
            )
            if predicted <= _FLOAT32_TARGET or (sweep >= 3 and change > 0.5 * last_change):
                break
            last_change = change
        previous = refined[:, :k]
    basis = _orthonormal_columns(basis.astype(np.float64))
    for _ in range(_MAX_FLOAT64_SWEEPS):
        refined, contraction = _sweep(centred, basis, k, workers)
        if contraction >= _NO_GAP:
            return None
        change = _subspace_change(refined[:, :k], basis[:, :k])
        safe = np.sqrt(contraction)
        if safe * change / (1.0 - safe) <= _ACCEPTED_ERROR:
            return refined[:, :k].copy()
        basis = refined
    return None


def _uses_fast_path(n: int, d: int, k: int) -> bool:
    width = min(k + _OVERSAMPLE, n, d)
    return not (min(n, d) <= 4 * width or n * d <= 250_000)


def _remove_and_normalise(
    centred_rows: Callable[[int, int], np.ndarray],
    directions: np.ndarray | None,
    out: np.ndarray,
    workers: SideBySide,
) -> None:
    """out = each centred row minus its projection on `directions`, L2-normalised (float32).

    Works in the precision `centred_rows` returns (float64 for the exact path, float32 for the
    iterated one, whose rows are float32 already).
    """
    n = out.shape[0]

    def work(lo: int, hi: int) -> None:
        for start in range(lo, hi, _CHUNK_ROWS):
            stop = min(start + _CHUNK_ROWS, hi)
            rows = centred_rows(start, stop)
            if directions is not None:
                basis = directions.astype(rows.dtype, copy=False)
                projection = rows @ basis
                rows = rows - projection @ basis.T
            norms_sq = np.einsum("ij,ij->i", rows, rows).astype(np.float64)
            scale = 1.0 / np.maximum(np.sqrt(norms_sq), 1e-9)
            if directions is not None:
                # A row lying in the removed subspace (always so when n ≤ k + 1) is zero in exact
                # arithmetic; normalising its rounding residue would invent a random direction.
                # (The basis is orthonormal, so ‖centred‖² = ‖residue‖² + ‖projection‖².)
                projected_sq = np.einsum("ij,ij->i", projection, projection).astype(np.float64)
                scale[norms_sq <= RESIDUE_TOLERANCE**2 * (norms_sq + projected_sq)] = 0.0
            np.multiply(
                rows, scale[:, None].astype(rows.dtype), out=out[start:stop], casting="same_kind"
            )

    workers.over_rows(n, work)


def principal_directions(
    features: np.ndarray, mean: np.ndarray, k: int, seed: int = 0
) -> np.ndarray:
    """Top-k right singular vectors (d × k, orthonormal, float64) of `features − mean`.

    The subspace, not the individual vectors, is what whitening removes; it matches the exact SVD's
    top-k subspace to the accepted error whenever σ_k is separated from the spectrum below it, and
    is the exact SVD's otherwise.
    """
    features = np.ascontiguousarray(features, dtype=np.float32)
    n, d = features.shape
    if _uses_fast_path(n, d, k):
        with side_by_side() as workers:
            directions = _iterated_directions(
                _centred_float32(features, mean, workers), k, workers, seed
            )
        if directions is not None:
            return directions
    return _exact_directions(features, mean, k)


def whiten(features: np.ndarray, k: int) -> np.ndarray:
    """Centre, remove the top-k principal directions, L2-normalise rows (float32 result).

    Fewer than two rows: the raw features unchanged. k = 0 or n ≤ k: centring and normalising only.
    """
    features = np.ascontiguousarray(features, dtype=np.float32)
    n, d = features.shape
    if n < 2:
        return features.copy()
    out = np.empty_like(features)
    with side_by_side() as workers:
        mean = _column_mean(features, workers)
        if k > 0 and n > k and _uses_fast_path(n, d, k):
            centred = _centred_float32(features, mean, workers)
            directions = _iterated_directions(centred, k, workers)
            if directions is not None:
                _remove_and_normalise(lambda lo, hi: centred[lo:hi], directions, out, workers)
                return out
        directions = _exact_directions(features, mean, k) if k > 0 and n > k else None
        _remove_and_normalise(lambda lo, hi: features[lo:hi] - mean, directions, out, workers)
    return out


@dataclass(frozen=True)
class Features:
    """φ without materialising the concatenation: φ_i = scale_i·[x_i ; context_i]."""

    hidden: np.ndarray  # (n, d) float32 whitened hidden states
    context: np.ndarray | None  # (n, c) float64, already unit-normalised and times ctx_w
    scale: np.ndarray  # (n,) float64

    def gram(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(φ_a·φ_b) over `rows` and the squared norms ‖φ_a‖², float64."""
        consecutive = (
            rows.size > 0 and rows[-1] - rows[0] + 1 == rows.size and np.all(np.diff(rows) == 1)
        )
        # canonical order keeps a task's rows together, so task buckets are views, not copies
        hidden = self.hidden[rows[0] : rows[-1] + 1] if consecutive else self.hidden[rows]
        gram = (hidden @ hidden.T).astype(np.float64)
        if self.context is not None:
            context = self.context[rows]
            gram += context @ context.T
        scale = self.scale[rows]
        gram *= scale[:, None] * scale[None, :]
        return gram, np.diag(gram).copy()


def build_features(
    hidden_states: np.ndarray, context: np.ndarray | None, phi: str, ctx_w: float, whiten_k: int
) -> Features:
    """φ per docs/estimators.md §5.4 from raw hidden states (canonical row order) and the context block."""
    hidden = whiten(hidden_states, whiten_k)
    n = hidden.shape[0]
    if phi != "hidden+ctx" or ctx_w <= 0:
        return Features(hidden=hidden, context=None, scale=np.ones(n))
    # Callers give the context block whenever hidden+ctx has a weight (None only otherwise).
    assert context is not None
    context_unit = context / np.maximum(np.linalg.norm(context, axis=1, keepdims=True), 1e-9)
    weighted = ctx_w * context_unit
    with side_by_side() as workers:
        hidden64_sq = _squared_row_norms(hidden, workers)
    norms = np.sqrt(hidden64_sq + np.einsum("ij,ij->i", weighted, weighted))
    return Features(hidden=hidden, context=weighted, scale=1.0 / np.maximum(norms, 1e-9))
