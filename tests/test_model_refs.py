"""Model references: one syntax ``[name=]target[?key=value&...]`` with typed values, and ``--model-arg`` merging."""

from __future__ import annotations

import pytest

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models import (
    ModelKind,
    ModelRef,
    apply_model_args,
    parse_model_args,
    parse_model_ref,
    split_model_list,
)
from robustbench_filters.models.loading import load_model
from robustbench_filters.models.ref import format_value, model_kind, parse_value


def test_timm_reference_with_typed_arguments() -> None:
    ref = parse_model_ref("timm:resnet18?num_classes=10&in_chans=1&img_size=32")
    assert ref.kind is ModelKind.TIMM and ref.target == "resnet18" and ref.name is None
    assert ref.args == {"num_classes": 10, "in_chans": 1, "img_size": 32}
    assert all(type(v) is int for v in ref.args.values())
    assert ref.label == "timm:resnet18?num_classes=10&in_chans=1&img_size=32"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", 10),
        ("-3", -3),
        ("0.5", 0.5),
        ("1e-3", 1e-3),
        ("8/255", 8 / 255),
        ("true", True),
        ("False", False),
        ("none", None),
        ("[0.5,0.25,1]", (0.5, 0.25, 1)),
        ("[]", ()),
        ("avg", "avg"),
        ('"10"', "10"),
        ("'a b'", "a b"),
        ("bicubic", "bicubic"),
    ],
)
def test_values_are_typed(text: str, value: object) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)
    assert parse_value(format_value(parsed)) == parsed


def test_display_name_factories_and_round_trip() -> None:
    ref = parse_model_ref("mynet=models.py:build?depth=3&act=gelu&mean=[0.5,0.5]")
    assert ref.kind is ModelKind.FACTORY and ref.name == "mynet" and ref.label == "mynet"
    assert ref.factory_parts == ("models.py", "build")
    assert ref.args == {"depth": 3, "act": "gelu", "mean": (0.5, 0.5)}
    assert parse_model_ref(str(ref)) == ref and hash(parse_model_ref(str(ref))) == hash(ref)
    dotted = parse_model_ref("my_pkg.models:build")
    assert dotted.kind is ModelKind.FACTORY and dotted.factory_parts == ("my_pkg.models", "build")
    assert parse_model_ref("sub/dir/m.py:Net.create").factory_parts == ("sub/dir/m.py", "Net.create")
    reg = parse_model_ref("deit-grc?grc_lambda=0&size=tiny")
    assert reg.kind is ModelKind.REGISTRY and reg.args == {"grc_lambda": 0, "size": "tiny"}
    assert parse_model_ref("deit").label == "deit"
    assert parse_model_ref("r18=timm:resnet18").label == "r18"


def test_model_args_merge_and_override() -> None:
    args = parse_model_args(["num_classes=10", "mean=[0.5]", "drop_rate=0.1", "global_pool=avg"])
    assert args == {"num_classes": 10, "mean": (0.5,), "drop_rate": 0.1, "global_pool": "avg"}
    ref = apply_model_args("timm:resnet18?num_classes=1000&in_chans=1", args)
    assert ref.args == {"num_classes": 10, "in_chans": 1, "mean": (0.5,), "drop_rate": 0.1, "global_pool": "avg"}
    assert apply_model_args("deit", {}) == ModelRef(ModelKind.REGISTRY, "deit")


def test_model_list_splits_outside_brackets() -> None:
    assert split_model_list("deit,timm:resnet18?mean=[0.5,0.5,0.5]&std=[1,1,1],a=m.py:f") == [
        "deit",
        "timm:resnet18?mean=[0.5,0.5,0.5]&std=[1,1,1]",
        "a=m.py:f",
    ]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: parse_model_args(["num_classes"]), "not key=value"),
        (lambda: parse_model_args(["num_classes="]), "has no value"),
        (lambda: parse_model_args(["1x=3"]), "bad model argument name"),
        (lambda: parse_model_args(["a=1", "a=2"]), "given twice"),
        (lambda: parse_model_args(["mean=[0.5,0.5"]), "unbalanced"),
        (lambda: parse_model_args(["lr=nan"]), "not finite"),
        (lambda: parse_model_ref("timm:resnet18?"), "no arguments"),
        (lambda: parse_model_ref("timm:resnet18?a=1&a=2"), "given twice"),
        (lambda: parse_model_ref("timm:"), "bad timm model"),
        (lambda: parse_model_ref("models.py:"), "bad factory"),
        (lambda: parse_model_ref("my-pkg.mod:build"), "bad factory module"),
        (lambda: parse_model_ref(""), "empty model reference"),
        (lambda: parse_model_ref("timm:resnet18?num_classes"), "not key=value"),
        (lambda: split_model_list("deit,,deit-grc"), "empty item"),
        (lambda: load_model("timm:resnet_18", checkpoint="none"), "unknown timm model 'resnet_18'. Did you mean"),
        (lambda: model_kind("deit-bas"), "unknown model 'deit-bas'"),
        (lambda: load_model("timm:resnet18.no_such_tag", checkpoint="none"), "has no config 'no_such_tag'"),
    ],
)
def test_bad_references_are_one_line_errors(call, match: str) -> None:
    with pytest.raises(RobfiltError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_the_kind_of_a_reference_imports_no_factory() -> None:
    assert model_kind("no_such_module_anywhere:build") == "custom"
    assert model_kind("timm:resnet18?num_classes=10") == "timm"
    assert model_kind("timm:deit_micro_bsa_grc_patch4_28") == "timm"
    assert model_kind("x=deit-grc?grc_lambda=0.2") == "image"
