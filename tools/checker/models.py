"""The registry of linearizability models by the name `--model` takes."""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.model import Model
from kraftpy.tools.checker.model_etcd import EtcdModel
from kraftpy.tools.checker.model_kv import KvModel
from kraftpy.tools.checker.model_queue import QueueModel
from kraftpy.tools.checker.model_register import CasRegisterModel, RegisterModel
from kraftpy.tools.checker.model_set import SetModel

MODEL_NAMES = ("register", "cas-register", "etcd", "kv", "set", "queue")


def make_model(name: str, init: Any = None, partition: bool = True) -> Model:
    """A fresh model instance; `init` applies to the registers, `partition` to kv."""
    if name == "register":
        return RegisterModel(init)
    if name == "cas-register":
        return CasRegisterModel(init)
    if name == "etcd":
        return EtcdModel()
    if name == "kv":
        return KvModel(partitioned=partition)
    if name == "set":
        return SetModel()
    if name == "queue":
        return QueueModel()
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODEL_NAMES)} or kafka")
