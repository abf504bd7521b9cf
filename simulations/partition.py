"""Partitioners: which training samples each client holds.

Each function returns a list with one sorted index array per client. Two Dirichlet families
are used by the papers and both are here:

- :func:`dirichlet_client_prior` (FedDyn / DFedCata style): equal client sizes, each client draws
  a class prior p_i ~ Dir(alpha) and fills its quota sample by sample from it.
- :func:`dirichlet_per_class` (NIID-bench "labeldir", FedMUD Non-IID-1): for each class,
  proportions over clients ~ Dir(alpha), with clients already at the average size excluded;
  implemented by flwr-datasets' ``DirichletPartitioner(self_balancing=True)``.

Infeasible requests (more clients than samples, a minimum size that cannot be met) raise
``ValueError`` instead of looping.
"""

from __future__ import annotations

import numpy as np

from flwr_strategies.setup import SettingError

PARTITIONS = ("iid", "dirichlet", "dirichlet-class", "pathological", "label-count", "natural")


def _check(labels: np.ndarray, num_clients: int) -> np.ndarray:
    labels = np.asarray(labels)
    if num_clients < 1:
        raise SettingError("num_clients", num_clients, "an integer >= 1")
    if num_clients > len(labels):
        raise SettingError("num_clients", num_clients, f"at most {len(labels)}: the training samples to split (more clients than samples)")
    return labels


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random permutation split into ``num_clients`` near-equal shards."""
    labels = _check(labels, num_clients)
    return [np.sort(s) for s in np.array_split(rng.permutation(len(labels)), num_clients)]


def dirichlet_client_prior(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator, *,
                           classes_per_client: int | None = None, refill: bool = False) -> list[np.ndarray]:
    """FedDyn-style Dirichlet split: equal sizes, per-client class prior p_i ~ Dir(alpha * 1_C).

    Clients take turns (in random order) drawing one class from their prior and taking the next
    unused sample of it. When a class runs out it is removed from every prior (renormalised), so
    each sample is assigned exactly once. ``refill=True`` reproduces the FedDyn/DFedCata code
    instead: an exhausted class is refilled, so samples may be repeated across clients.
    With ``classes_per_client=k`` the prior is uniform over k random classes (the papers'
    pathological ``Path(k)``) instead of Dirichlet.
    """
    labels = _check(labels, num_clients)
    if classes_per_client is None and not alpha > 0:
        raise SettingError("alpha", alpha, "a number > 0")
    classes = np.unique(labels)
    n_cls = len(classes)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    if classes_per_client is not None:
        if not 1 <= classes_per_client <= n_cls:
            raise SettingError("classes_per_client", classes_per_client, f"in [1, {n_cls}] (the dataset's classes)")
        prior = np.zeros((num_clients, n_cls))
        for i in range(num_clients):
            prior[i, rng.choice(n_cls, classes_per_client, replace=False)] = 1.0 / classes_per_client
    else:
        prior = rng.dirichlet(np.full(n_cls, alpha), size=num_clients)
    remaining = np.full(num_clients, len(labels) // num_clients)  # equal sizes
    left = np.array([len(p) for p in pools])
    taken = np.zeros(n_cls, dtype=int)
    out: list[list[int]] = [[] for _ in range(num_clients)]
    while remaining.sum() > 0:
        i = int(rng.choice(np.flatnonzero(remaining > 0)))
        p = prior[i] * (left > 0) if not refill else prior[i]
        if p.sum() <= 0:  # every class of its prior is used up: fall back to what is left
            p = (left > 0).astype(float)
        c = int(rng.choice(n_cls, p=p / p.sum()))
        if left[c] == 0:  # refill mode only
            left[c] = len(pools[c])
            taken[c] = 0
        out[i].append(int(pools[c][taken[c]]))
        taken[c] += 1
        left[c] -= 1
        remaining[i] -= 1
    return [np.sort(np.array(o, dtype=np.int64)) for o in out]


def dirichlet_per_class(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator | int, *,
                        min_size: int = 10) -> list[np.ndarray]:
    """NIID-bench "labeldir" split (FedMUD Non-IID-1) via flwr-datasets' ``DirichletPartitioner``.

    For each class, proportions over clients are drawn from Dir(alpha); clients already holding
    more than the average number of samples get none of it (``self_balancing``). The draw is
    repeated until every client has ``min_size`` samples; after 10 failed attempts it raises
    ``ValueError`` (the NIID-bench code would loop forever). Difference from NIID-bench: the cap
    excludes clients *above* the average (NIID-bench: at or above).
    """
    import warnings

    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner

    labels = _check(labels, num_clients)
    if not alpha > 0:
        raise SettingError("alpha", alpha, "a number > 0")
    if min_size * num_clients > len(labels):
        raise ValueError(f"min_size {min_size} x {num_clients} clients exceeds the {len(labels)} samples")
    seed = int(rng.integers(2**31 - 1)) if isinstance(rng, np.random.Generator) else int(rng)
    part = DirichletPartitioner(num_partitions=num_clients, partition_by="label", alpha=float(alpha),
                                min_partition_size=min_size, self_balancing=True, shuffle=True, seed=seed)
    part.dataset = Dataset.from_dict({"label": labels.astype(np.int64), "idx": np.arange(len(labels))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            part.load_partition(0)
        except ValueError as err:
            raise ValueError(
                f"Dirichlet split with alpha={alpha} could not give every one of {num_clients} clients "
                f"{min_size} samples in 10 attempts; raise alpha or lower min_size ({err})"
            ) from None
    return [np.sort(np.asarray(part._partition_id_to_indices[i], dtype=np.int64)) for i in range(num_clients)]


def pathological(labels: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each client holds k random classes (DFedCata ``Path(k)``): equal sizes, uniform prior over them."""
    return dirichlet_client_prior(labels, num_clients, 1.0, rng, classes_per_client=k)


def label_count(labels: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """FedMUD Non-IID-2 ("labelcnt") as its code does it: deterministic cyclic label dealing.

    Client i takes the k labels used least so far (ties to the lower label), so every label is
    held by the same number of clients; each label's shuffled indices are split evenly
    (``array_split``) among its holders.
    """
    labels = _check(labels, num_clients)
    classes = np.unique(labels)
    if not 1 <= k <= len(classes):
        raise SettingError("classes_per_client", k, f"in [1, {len(classes)}] (labels per client, the dataset's classes)")
    usage = np.zeros(len(classes), dtype=int)
    holders: list[list[int]] = [[] for _ in classes]
    for i in range(num_clients):
        chosen = np.lexsort((np.arange(len(classes)), usage))[:k]
        for c in chosen:
            holders[c].append(i)
            usage[c] += 1
    out: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, who in enumerate(holders):
        if not who:
            continue
        idx = rng.permutation(np.flatnonzero(labels == classes[c]))
        for client, chunk in zip(who, np.array_split(idx, len(who))):
            out[client].append(chunk)
    parts = [np.sort(np.concatenate(o)) if o else np.zeros(0, dtype=np.int64) for o in out]
    if any(len(p) == 0 for p in parts):
        raise ValueError(f"label-count split left a client empty ({num_clients} clients, {k} labels each)")
    return parts


def natural(groups: np.ndarray | None, num_clients: int) -> list[np.ndarray]:
    """The dataset's own client grouping (``synthetic``): client i holds the samples of group i."""
    if groups is None:
        raise SettingError("partition", "natural", "a partition this dataset supports: 'natural' needs natural client groups (synthetic)")
    n_groups = int(groups.max()) + 1
    if n_groups != num_clients:
        raise SettingError("num_clients", num_clients, f"{n_groups}: the dataset's natural client groups (partition 'natural')")
    return [np.flatnonzero(groups == i) for i in range(num_clients)]


def make_partition(kind: str, labels: np.ndarray, num_clients: int, seed: int, *, alpha: float = 0.5,
                   classes_per_client: int = 2, groups: np.ndarray | None = None,
                   min_size: int = 10) -> list[np.ndarray]:
    """Dispatch by name; an unknown name raises ``KeyError`` listing the valid ones."""
    rng = np.random.default_rng(seed)
    kind = kind.lower()
    if kind == "iid":
        return iid(labels, num_clients, rng)
    if kind == "dirichlet":
        return dirichlet_client_prior(labels, num_clients, alpha, rng)
    if kind == "dirichlet-class":
        return dirichlet_per_class(labels, num_clients, alpha, rng, min_size=min(min_size, len(labels) // num_clients))
    if kind == "pathological":
        return pathological(labels, num_clients, classes_per_client, rng)
    if kind == "label-count":
        return label_count(labels, num_clients, classes_per_client, rng)
    if kind == "natural":
        return natural(groups, num_clients)
    raise KeyError(f"unknown partition '{kind}'; valid partitions: {', '.join(PARTITIONS)}")
