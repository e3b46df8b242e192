"""Random FrozenLake maps as dataset rows, registered with rLLM's `DatasetRegistry` under "frozenlake".

A row is what `FrozenLakeEnv.from_dict` reads (`seed`, `size`, `p`) plus a name; the values are numpy scalars on
purpose, as a numpy-minded user would leave them, so the registry's handling of them is exercised too."""

import numpy as np

from rllm.data.dataset import DatasetRegistry


def random_lakes(count, rng, first_index=0):
    """`count` map descriptions: side length 3 to 7, frozen-cell probability between 0.65 and 0.9."""
    seeds = rng.integers(0, 50_000, size=count)
    sides = rng.integers(3, 8, size=count)
    frozen = rng.uniform(0.65, 0.9, size=count)
    return [
        {"seed": seeds[i], "size": sides[i], "p": frozen[i], "name": f"lake-{first_index + i}"} for i in range(count)
    ]


def make_lake_tasks(train_count=64, eval_count=12, seed=11):
    """Register a train and a test split; return both datasets."""
    rng = np.random.default_rng(seed)
    train = DatasetRegistry.register_dataset("frozenlake", random_lakes(train_count, rng), "train")
    test = DatasetRegistry.register_dataset("frozenlake", random_lakes(eval_count, rng, train_count), "test")
    return train, test


if __name__ == "__main__":
    train, test = make_lake_tasks()
    print(f"registered frozenlake: {len(train)} train rows, {len(test)} test rows")
