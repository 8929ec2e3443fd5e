"""End to end: an MLP trained with Adam on scikit-learn's bundled digits (8x8 images, no download) through the
whole stack (modules, autograd, optimizer, realize), seeded. Oracles: torch trained from the same initial weights
on the same batches lands on the same weights after a few steps, and the held-out accuracy reaches 96%.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensor import Tensor
from tensor.modules import Linear, Sequential, cross_entropy
from tensor.optim import Adam

BATCH, EPOCHS, LR = 100, 12, 0.01


def _data():
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(x))
    return x[perm[:1400]], y[perm[:1400]], x[perm[1400:]], y[perm[1400:]]


def _batches(n: int, epochs: int):
    rng = np.random.default_rng(1)
    for _ in range(epochs):
        order = rng.permutation(n)
        for k in range(0, n, BATCH):
            yield order[k:k + BATCH]


def _model():
    Tensor.manual_seed(0)
    return Sequential(Linear(64, 64), Tensor.relu, Linear(64, 10))


def test_mlp_learns_digits():
    xtr, ytr, xte, yte = _data()
    model = _model()
    opt = Adam(model.parameters(), lr=LR)
    losses = []
    for b in _batches(len(xtr), EPOCHS):
        opt.zero_grad()
        loss = cross_entropy(model(Tensor(xtr[b])), Tensor(ytr[b]))
        loss.backward()
        opt.step(loss)
        losses.append(loss.item())
    acc = float((model(Tensor(xte)).numpy().argmax(1) == yte).mean())
    assert acc >= 0.96, (acc, losses[-5:])
    assert np.mean(losses[-10:]) < 0.2 < losses[0]


def test_first_steps_match_torch():
    torch = pytest.importorskip("torch")
    xtr, ytr, _, _ = _data()
    model = _model()
    tmodel = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    sd = model.state_dict()
    with torch.no_grad():
        for k, v in tmodel.state_dict().items():  # the same names as torch's Sequential
            v.copy_(torch.tensor(sd[k].numpy()))
    opt, topt = Adam(model.parameters(), lr=LR), torch.optim.Adam(tmodel.parameters(), lr=LR)
    for b in _batches(len(xtr), 1):
        opt.zero_grad()
        loss = cross_entropy(model(Tensor(xtr[b])), Tensor(ytr[b]))
        loss.backward()
        opt.step(loss)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(xtr[b])), torch.tensor(ytr[b]).long())
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(sd[k].numpy(), v.numpy(), rtol=1e-3, atol=1e-4, err_msg=k)


def test_train_digits_script_saves_and_reloads(tmp_path):
    pytest.importorskip("sklearn.datasets")
    from tensor import train_digits
    from tensor.state import safe_load

    path = tmp_path / "digits.safetensors"
    acc = train_digits.main(["--epochs", "3", "--save", str(path)])  # raises if the reloaded model differs
    assert acc > 0.9
    assert set(safe_load(path)) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_train_digits_jit_equals_eager(tmp_path):
    """The script's step under tensor.jit (the default) lands on the very weights of the step run as written, the
    CNN's batch norm running statistics (updated in place under the replay) included."""
    pytest.importorskip("sklearn.datasets")
    from tensor import train_digits
    from tensor.state import safe_load

    got = {}
    for flag in ([], ["--no-jit"]):
        path = tmp_path / f"cnn{len(flag)}.safetensors"
        got[len(flag)] = (train_digits.main(["--cnn", "--epochs", "1", "--save", str(path), *flag]), safe_load(path))
    (acc_jit, w_jit), (acc, w) = got[0], got[1]
    assert acc_jit == acc > 0.5
    assert set(w_jit) == set(w) and "1.running_var" in w
    for k in w:
        np.testing.assert_array_equal(w_jit[k].numpy(), w[k].numpy(), err_msg=k)
    assert int(w["1.num_batches_tracked"].numpy()) == 14  # 1,400 training images in batches of 100
