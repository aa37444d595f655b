"""Whitening removes the same top-k subspace as an exact SVD, without taking one."""

from __future__ import annotations

import numpy as np
import pytest

from ccpo_cli.estimators import blas as blas_module
from ccpo_cli.estimators import features as features_module
from ccpo_cli.estimators.features import principal_directions, whiten


def strong_spectrum(
    n: int, d: int, seed: int, strengths=(40.0, 25.0, 15.0, 4.0, 3.0, 2.0)
) -> np.ndarray:
    """A few strong shared directions, anisotropic noise and a large common offset."""
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.standard_normal((d, len(strengths))))[0].T
    shared = (rng.standard_normal((n, len(strengths))) * np.array(strengths)) @ directions
    noise = rng.standard_normal((n, d)) * (0.2 + rng.random(d)) * 0.5
    return (shared + noise + 5.0 * rng.standard_normal(d)).astype(np.float32)


def exact_projection(features: np.ndarray, k: int) -> np.ndarray:
    centred = features.astype(np.float64) - features.astype(np.float64).mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[:k].T @ vt[:k]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_subspace_iteration_matches_exact_svd(seed, monkeypatch):
    features = strong_spectrum(640, 480, seed)
    exact_calls = []
    original = features_module._exact_directions
    monkeypatch.setattr(
        features_module, "_exact_directions", lambda *a: exact_calls.append(1) or original(*a)
    )
    directions = principal_directions(features, features.mean(0, dtype=np.float64), 3)
    assert not exact_calls, "the fast path must not fall back to a full SVD on a gapped spectrum"
    difference = np.linalg.norm(directions @ directions.T - exact_projection(features, 3), 2)
    assert difference <= 1e-6
    np.testing.assert_allclose(directions.T @ directions, np.eye(3), atol=1e-12)


def test_whitened_rows_match_the_exact_recipe():
    features = strong_spectrum(640, 480, 3)
    centred = features.astype(np.float64) - features.astype(np.float64).mean(0)
    exact = centred - centred @ exact_projection(features, 3)
    exact /= np.maximum(np.linalg.norm(exact, axis=1, keepdims=True), 1e-9)
    np.testing.assert_allclose(whiten(features, 3), exact, atol=1e-5)


def test_massive_activation_dimensions_are_centred_exactly():
    # Final-norm hidden states carry a few huge near-constant coordinates. Centring with the mean
    # rounded to float32 would shift every row by that rounding (up to ~1e-3 here), which the
    # normalised rows would keep; the exact recipe does not have it.
    features = strong_spectrum(640, 480, 6)
    features[:, [3, 70, 200, 411]] += np.float32(30000.0)
    centred = features.astype(np.float64) - features.astype(np.float64).mean(0)
    exact = centred - centred @ exact_projection(features, 3)
    exact /= np.linalg.norm(exact, axis=1, keepdims=True)
    np.testing.assert_allclose(whiten(features, 3), exact, atol=1e-5)


def test_result_does_not_depend_on_the_number_of_cores(monkeypatch):
    features = strong_spectrum(640, 480, 5)
    monkeypatch.setattr(blas_module.os, "cpu_count", lambda: 8)
    side_by_side = whiten(features, 3)
    monkeypatch.setattr(blas_module.os, "cpu_count", lambda: 1)
    np.testing.assert_array_equal(whiten(features, 3), side_by_side)


def test_flat_spectrum_falls_back_to_the_exact_subspace():
    rng = np.random.default_rng(4)
    features = rng.standard_normal((600, 480)).astype(np.float32)  # no gap after k = 3
    directions = principal_directions(features, features.mean(0, dtype=np.float64), 3)
    assert np.linalg.norm(directions @ directions.T - exact_projection(features, 3), 2) <= 1e-6


def test_small_cases():
    one_row = np.array([[3.0, 4.0]], dtype=np.float32)
    np.testing.assert_array_equal(whiten(one_row, 3), one_row)  # n < 2: raw, not normalised
    three = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3]], dtype=np.float32)
    expected = three - three.mean(0)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(whiten(three, 3), expected, atol=1e-6)  # n <= k: no removal
    same = np.ones((4, 5), dtype=np.float32)
    np.testing.assert_array_equal(whiten(same, 3), np.zeros((4, 5), dtype=np.float32))
