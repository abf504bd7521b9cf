"""mkdocstrings (griffe) extension for the API pages: a config field declared with ``setting()``.

``beta: float = setting(0.99, "[0, 1)", "paper: ...", "What beta means.")`` is read from the source
(nothing is imported): the field gets a docstring with its meaning, default, valid range and source,
the same declaration ``help()`` prints in a strategy's "Hyperparameters" section, and the class
signature shows the default (``beta: float = 0.99``).
"""

from __future__ import annotations

import ast

import griffe


def _text(node: ast.AST | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


class SettingFields(griffe.Extension):
    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        call = getattr(node, "value", None)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "setting"):
            return
        names = ("default", "range", "source", "doc")
        given = dict(zip(names, call.args)) | {k.arg: k.value for k in call.keywords if k.arg in names}
        default = ast.unparse(given["default"])
        lines = [_text(given.get("doc")), "",
                 f"Default ``{default}``; valid range: {_text(given['range'])}. Source: {_text(given['source'])}."]
        attr.docstring = griffe.Docstring("\n".join(lines).strip(), parent=attr)
        attr.value = default
