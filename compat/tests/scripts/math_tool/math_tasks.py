"""Fetch math problems from the Hugging Face hub and register them with rLLM's `DatasetRegistry`: DeepScaleR's
problems as "deepscaler_math" (train) and AIME 2024 as "aime2024" (test), each row a question, its answer and a
data source."""

from datasets import load_dataset

from rllm.data.dataset import DatasetRegistry


def as_task(problem, answer):
    return {"question": problem, "ground_truth": str(answer), "data_source": "math"}


def register_math_tasks():
    deepscaler = load_dataset("agentica-org/DeepScaleR-Preview-Dataset", split="train")
    aime = load_dataset("HuggingFaceH4/aime_2024", split="train")
    train_rows = [as_task(row["problem"], row["answer"]) for row in deepscaler]
    test_rows = [as_task(row["problem"], row["answer"]) for row in aime]
    return (
        DatasetRegistry.register_dataset("deepscaler_math", train_rows, "train"),
        DatasetRegistry.register_dataset("aime2024", test_rows, "test"),
    )


if __name__ == "__main__":
    train, test = register_math_tasks()
    print(f"registered {len(train)} training and {len(test)} test problems")
