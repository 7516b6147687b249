"""Hugging Face transformers' ``Trainer`` fed by ferroloader, as the image-classification
example writes it: a ``datasets.Dataset`` of an ``Image()`` and a label column with the
torchvision transforms set on it (``with_transform``), a ``collate_fn`` making
``{"pixel_values", "labels"}``, a (tiny, made from its config) ``ViTForImageClassification``.
``ferroloader.transformers.Trainer``, with ``train_transform``/``eval_transform`` or with the
datasets' functions traced, fits it on the
loader's batches (each epoch the loader's epoch, from the Trainer's seed and batch size), the
gradient accumulation steps at each epoch's end, evaluation batches equal the Trainer's own
DataLoader's, and a resume from a checkpoint mid-epoch gets the uninterrupted run's batches."""

from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import torch

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

import accelerate.data_loader  # type: ignore[import-untyped]
import transformers.trainer
from torchvision import transforms as TV
from transformers import TrainerCallback, TrainingArguments, ViTConfig, ViTForImageClassification

import ferroloader as fl
from conftest import run_ranks
from ferroloader.accelerate import AcceleratedLoader
from ferroloader.transformers import LoaderTrainerMixin, Trainer

PHOTOS = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "folder"
SAMPLES = 22  # 6 batches of 4 an epoch, the last of 2
CLASSES = 8
NORMALIZE = TV.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])  # the image processor's mean/std
TRAIN = TV.Compose([TV.RandomResizedCrop(32), TV.RandomHorizontalFlip(), TV.ToTensor(), NORMALIZE])
EVAL = TV.Compose([TV.Resize(32), TV.CenterCrop(32), TV.ToTensor(), NORMALIZE])


@pytest.fixture(scope="module")
def dataset() -> Any:
    files = sorted(PHOTOS.glob("class*/*.jpg"))
    assert len(files) > 400, "run `make test-python`: it makes target/fixtures/folder"
    files = files[:: len(files) // SAMPLES][:SAMPLES]
    labels = [int(p.parent.name[-2:]) for p in files]
    assert len(set(labels)) == CLASSES
    data = datasets.Dataset.from_dict({"image": [str(p) for p in files], "label": labels})
    return data.cast_column("image", datasets.Image())


def with_example_transform(data: Any, transform: Any) -> Any:
    """The dataset as the example sets it up for the Trainer's DataLoader."""

    def preprocess(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["pixel_values"] = [transform(image.convert("RGB")) for image in batch["image"]]
        return batch

    return data.with_transform(preprocess)


def collate_fn(examples: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example["label"] for example in examples])
    return {"pixel_values": pixel_values, "labels": labels}


def model() -> Any:
    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=CLASSES,
    )
    return ViTForImageClassification(config)


class Tiny(torch.nn.Module):
    """A linear classifier: the resume test compares its weights, which transformers 5.24
    does not load back into a ViT made from a config (it renames the layers it saves)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3 * 32 * 32, CLASSES)

    def forward(self, pixel_values: torch.Tensor, labels: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        logits = self.linear(pixel_values.flatten(1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def arguments(out: Path, **kw: Any) -> Any:
    kw.setdefault("per_device_train_batch_size", 4)
    kw.setdefault("per_device_eval_batch_size", 5)
    kw.setdefault("num_train_epochs", 2)
    kw.setdefault("save_strategy", "no")
    return TrainingArguments(
        str(out), use_cpu=True, report_to=[], logging_strategy="no", disable_tqdm=True,
        learning_rate=0.05, seed=3, **kw,
    )


class Recording(LoaderTrainerMixin, transformers.Trainer):  # type: ignore[misc]
    """Keeps each micro-batch trained on, and how many came before each optimizer step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: List[Tuple[List[int], torch.Tensor]] = []
        self.per_step: List[int] = []
        self.add_callback(_CountSteps(self))

    def training_step(self, model: Any, inputs: Dict[str, Any], num_items_in_batch: Any = None) -> Any:
        assert sorted(inputs) == ["labels", "pixel_values"]
        self.seen.append((inputs["labels"].tolist(), inputs["pixel_values"].clone()))
        return super().training_step(model, inputs, num_items_in_batch)


class _CountSteps(TrainerCallback):  # type: ignore[misc]
    def __init__(self, trainer: Recording) -> None:
        self.trainer = trainer
        self.before = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer.per_step.append(len(self.trainer.seen) - self.before)
        self.before = len(self.trainer.seen)


def assert_same_batches(got: List[Tuple[List[int], torch.Tensor]], want: List[Tuple[List[int], torch.Tensor]]) -> None:
    assert [labels for labels, _ in got] == [labels for labels, _ in want]
    for (_, images), (_, expected) in zip(got, want):
        assert torch.equal(images, expected), (images - expected).abs().max()


def epoch_batches(data: Any, epoch: int, **kw: Any) -> List[Tuple[List[int], torch.Tensor]]:
    loader = fl.Loader(data, transform=TRAIN, num_workers=0, **kw)
    loader.set_epoch(epoch)
    return [(labels.tolist(), images) for images, labels in loader]


@pytest.fixture(autouse=True)
def accelerate_skip_is_back() -> Iterator[None]:
    yield
    # train() puts its skip in transformers.trainer only while it runs.
    assert transformers.trainer.skip_first_batches is accelerate.data_loader.skip_first_batches


def test_fits_each_epoch_on_the_loaders_epoch_stepping_at_its_end(dataset: Any, tmp_path: Path) -> None:
    args = arguments(tmp_path, gradient_accumulation_steps=4, data_seed=11, dataloader_num_workers=2)
    trainer = Recording(
        model(), args, train_dataset=with_example_transform(dataset, TRAIN), data_collator=collate_fn,
        train_transform=TRAIN,
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    result = trainer.train()
    assert isinstance(trainer.train_loader, AcceleratedLoader) and len(trainer.train_loader) == 6
    # 6 batches an epoch, 4 accumulated: steps after the 4th and the 6th (the epoch's last), and
    # the next epoch's count starts afresh.
    assert trainer.per_step == [4, 2, 4, 2] and result.global_step == 4
    # The Trainer's epoch e is the loader's epoch e, shuffled from data_seed, batch_size the
    # Trainer's: every sample once, a new order each epoch.
    for epoch in (0, 1):
        want = epoch_batches(dataset, epoch, batch_size=4, shuffle=True, seed=11)
        assert_same_batches(trainer.seen[epoch * 6 : (epoch + 1) * 6], want)
        assert sorted(i for labels, _ in want for i in labels) == sorted(dataset["label"])
    assert [b[0] for b in trainer.seen[:6]] != [b[0] for b in trainer.seen[6:]]
    assert all(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert torch.isfinite(torch.tensor(result.training_loss))


def test_evaluation_batches_equal_the_trainers_own_dataloader(dataset: Any, tmp_path: Path) -> None:
    # Resize + CenterCrop is deterministic: the loader's batches are the DataLoader's, pixel
    # for pixel, and so are evaluate()'s and predict()'s results.
    data = with_example_transform(dataset, EVAL)
    results: Dict[str, List[bool]] = {"own": [], "ours": []}

    def metrics(which: str) -> Any:
        def compute(prediction: Any, compute_result: bool) -> Dict[str, float]:
            results[which].append(compute_result)  # True at the last batch alone
            return {"labels": float(prediction.label_ids.sum())}

        return compute

    def kw(which: str) -> Dict[str, Any]:
        args = arguments(
            tmp_path / which, remove_unused_columns=False, dataloader_drop_last=True,
            batch_eval_metrics=True,
        )
        return dict(args=args, eval_dataset=data, data_collator=collate_fn, compute_metrics=metrics(which))

    own = transformers.Trainer(model(), **kw("own"))
    ours = Trainer(model(), train_transform=TRAIN, eval_transform=EVAL, **kw("ours"))
    want = list(own.get_eval_dataloader())
    got = ours.get_eval_dataloader()
    assert isinstance(got, AcceleratedLoader) and len(got) == len(want) == 4  # 22 // 5, dropped last
    got_batches = list(got)
    for batch, expected in zip(got_batches, want):
        assert sorted(batch) == sorted(expected) == ["labels", "pixel_values"]
        assert torch.equal(batch["labels"], expected["labels"])
        assert torch.equal(batch["pixel_values"], expected["pixel_values"]), (
            (batch["pixel_values"] - expected["pixel_values"]).abs().max()
        )
    evaluated = ours.evaluate(), own.evaluate()
    assert results["ours"] == results["own"] == [False, False, False, True]
    assert evaluated[0]["eval_loss"] == pytest.approx(evaluated[1]["eval_loss"], abs=1e-6)
    assert evaluated[0]["eval_labels"] == evaluated[1]["eval_labels"]
    predicted = ours.predict(data), own.predict(data)
    assert torch.allclose(torch.as_tensor(predicted[0].predictions), torch.as_tensor(predicted[1].predictions), atol=1e-6)
    # Without a transform for it, the dataset's function is traced: the same batches, the
    # example's collate_fn making them.
    traced = Trainer(model(), train_transform=TRAIN, **kw("traced"))
    loader = traced.get_eval_dataloader()
    assert isinstance(loader, AcceleratedLoader) and loader.loader.python_dataset_reason is None
    assert len(loader) == 4
    for batch, expected in zip(loader, want):
        assert torch.equal(batch["pixel_values"], expected["pixel_values"])
        assert torch.equal(batch["labels"], expected["labels"])
    # One it cannot follow is the Trainer's own DataLoader, with the reason.
    def opaque(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch["pixel_values"] = [EVAL(image.convert("RGB")) for image in batch["image"] if image.size]
        return batch

    own_kw = kw("opaque")
    own_kw["eval_dataset"] = dataset.with_transform(opaque)
    with pytest.warns(UserWarning, match=r"evaluation dataset is loaded by the Trainer's own DataLoader: .*\.size"):
        assert type(Trainer(model(), **own_kw).get_eval_dataloader()).__name__ == "DataLoaderShard"


def test_the_examples_datasets_alone_fit_natively(dataset: Any, tmp_path: Path) -> None:
    """The example's script with only the import changed: its set_transform functions and its
    collate_fn, no transforms given."""
    args = arguments(tmp_path, data_seed=11, dataloader_num_workers=2, remove_unused_columns=False)
    trainer = Recording(
        model(), args, train_dataset=with_example_transform(dataset, TRAIN), data_collator=collate_fn,
    )
    result = trainer.train()
    loader = trainer.train_loader
    assert isinstance(loader, AcceleratedLoader) and loader.loader.python_dataset_reason is None
    assert len(trainer.seen) == 12 and result.global_step == 12
    # The same batches as with train_transform= given: the draws are per sample either way.
    for epoch in (0, 1):
        want = epoch_batches(dataset, epoch, batch_size=4, shuffle=True, seed=11)
        assert_same_batches(trainer.seen[epoch * 6 : (epoch + 1) * 6], want)


def test_a_dataset_preprocessed_by_an_image_processor_is_read_natively(dataset: Any, tmp_path: Path) -> None:
    """The ViT fine-tuning blog's set-up: the processor in the with_transform function."""
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})

    def transform(example_batch: Dict[str, List[Any]]) -> Any:
        inputs = processor([x.convert("RGB") for x in example_batch["image"]], return_tensors="pt")
        inputs["label"] = example_batch["label"]
        return inputs

    data = dataset.with_transform(transform)
    args = arguments(tmp_path, remove_unused_columns=False)
    want = list(transformers.Trainer(model(), args, eval_dataset=data, data_collator=collate_fn).get_eval_dataloader())
    trainer = Trainer(model(), args, train_dataset=data, eval_dataset=data, data_collator=collate_fn)
    loader = trainer.get_eval_dataloader()
    assert isinstance(loader, AcceleratedLoader) and loader.loader.python_dataset_reason is None
    got = list(loader)
    assert len(got) == len(want) > 0
    for batch, expected in zip(got, want):
        assert torch.equal(batch["labels"], expected["labels"])
        # The processor fuses its rescale into the normalization: the last bits differ.
        assert torch.allclose(batch["pixel_values"], expected["pixel_values"], rtol=0, atol=1e-6)
    assert trainer.train().global_step == 12


def test_a_resume_mid_epoch_gets_the_uninterrupted_runs_batches(dataset: Any, tmp_path: Path) -> None:
    # 6 batches an epoch, 2 accumulated: 3 steps an epoch. The checkpoint at step 4 is 2 batches
    # into the second epoch; the Trainer skips those, and the loader starts there natively.
    def run(resume: Optional[str], **kw: Any) -> Recording:
        args = arguments(
            tmp_path / "run", gradient_accumulation_steps=2, save_strategy="steps", save_steps=4,
            dataloader_num_workers=2,
        )
        # A model with no main_input_name: the images go as pixel_values.
        trainer = Recording(Tiny(), args, train_dataset=dataset, train_transform=TRAIN, **kw)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    whole = run(None)
    assert len(whole.seen) == 12 and whole.per_step == [2] * 6
    checkpoint = str(tmp_path / "run" / "checkpoint-4")
    resumed = run(checkpoint)
    assert_same_batches(resumed.seen, whole.seen[8:])
    for a, b in zip(resumed.model.parameters(), whole.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    # Where a batch count does not say the point, the resume is refused, naming why.
    with pytest.raises(ValueError, match="on_error='skip' moves every batch"):
        run(checkpoint, loader_kwargs={"on_error": "skip"})


def test_the_skip_holds_whichever_order_the_trainer_sets_the_epoch_in(dataset: Any, tmp_path: Path) -> None:
    # transformers 5 skips, then sets the resumed epoch; 4.x set it first, then skipped.
    trainer = Trainer(model(), arguments(tmp_path), train_dataset=dataset, train_transform=TRAIN)
    want = epoch_batches(dataset, 1, batch_size=4, shuffle=True, seed=3)[2:]
    for order in ("skip first", "epoch first"):
        loader = trainer.get_train_dataloader()
        if order == "skip first":
            assert loader.skip_first_batches(2) is loader
            loader.set_epoch(1)
        else:
            loader.set_epoch(1)
            loader.skip_first_batches(2)
        assert_same_batches([(b["labels"].tolist(), b["pixel_values"]) for b in loader], want)
        # The skip is the resumed epoch's alone.
        loader.set_epoch(2)
        assert len(list(loader)) == 6 and loader.epoch == 3


def test_what_the_trainer_sets_is_refused_in_loader_kwargs(dataset: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loader_kwargs: 'batch_transform' is the Trainer's to set"):
        Trainer(model(), arguments(tmp_path), loader_kwargs={"batch_transform": None})
    grouped = Trainer(
        model(), arguments(tmp_path, train_sampling_strategy="group_by_length"), train_dataset=dataset,
        train_transform=TRAIN,
    )
    with pytest.raises(ValueError, match="train_sampling_strategy: 'group_by_length'"):
        grouped.get_train_dataloader()
    two = Trainer(model(), arguments(tmp_path, label_names=["labels", "extra"]), train_dataset=dataset,
                  train_transform=TRAIN)
    with pytest.raises(ValueError, match="label_names"):
        two.get_train_dataloader()
    sequential = Trainer(
        model(), arguments(tmp_path, train_sampling_strategy="sequential"), train_dataset=dataset,
        train_transform=TRAIN,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = sequential.get_train_dataloader()
    assert not loader.loader.shuffle and loader.loader.seed == 3


# -- two processes ---------------------------------------------------------------------------------

WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_rank(rank: int, port: int, out: str, data: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1",  # as torchrun sets
    )
    # torch's OpenMP pool, used by the parent's earlier tests, is not usable in a forked child.
    torch.set_num_threads(1)
    # Accelerate's state is a per-process singleton, set up single-process by the parent's tests.
    from accelerate.state import AcceleratorState, GradientState  # type: ignore[import-untyped]

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    result: Dict[str, Any] = {}

    def run(resume: Optional[str]) -> Recording:
        args = arguments(
            Path(out, "run"), num_train_epochs=1, save_strategy="steps", save_steps=2,
            ddp_backend="gloo", per_device_eval_batch_size=5,
        )
        trainer = Recording(
            Tiny(), args, train_dataset=data, eval_dataset=data.select(range(SAMPLES - 1)),
            train_transform=TRAIN, eval_transform=EVAL,
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    whole = run(None)
    loader = whole.train_loader
    assert loader is not None
    result["cut"] = [loader.rank, loader.world_size, len(loader), whole.args.world_size]
    result["seen"] = [labels for labels, _ in whole.seen]
    # 21 samples: each process 11 (one padded), the last eval batch one sample each.
    predicted = whole.predict(data.select(range(SAMPLES - 1)))
    result["predicted"] = [len(predicted.predictions), sorted(predicted.label_ids.tolist())]
    resumed = run(str(Path(out, "run", "checkpoint-2")))
    result["resumed"] = [labels for labels, _ in resumed.seen]
    result["resumed_equal"] = all(
        torch.equal(a, b) for (_, a), (_, b) in zip(resumed.seen, whole.seen[2:])
    )
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def test_two_processes_cut_gather_and_resume(dataset: Any, tmp_path: Path) -> None:
    results = run_ranks(run_rank, (free_port(), str(tmp_path), dataset), tmp_path, WORLD)
    for rank, result in enumerate(results):
        # The loader cuts itself as DistributedSampler does: 11 samples a process, 4 + 4 + 3.
        assert result["cut"] == [rank, WORLD, 3, WORLD]
        assert [len(labels) for labels in result["seen"]] == [4, 4, 3]
        # gather_for_metrics drops the padded sample: each of the 21 predicted once.
        assert result["predicted"] == [SAMPLES - 1, sorted(dataset["label"][: SAMPLES - 1])]
        # Resumed from the checkpoint rank 0 wrote at step 2: this process's last batch.
        assert result["resumed"] == result["seen"][2:] and result["resumed_equal"]
    shares = [[i for labels in r["seen"] for i in labels] for r in results]
    assert sorted(shares[0] + shares[1]) == sorted(dataset["label"])
