"""MkDocs hooks: parts of pages made at build time from their one home, never written twice.

The command line's reference from the typer app (typer's own Markdown generator, as `typer ...
utils docs` writes it), the study file's from the JSON Schema `hvbench study schema` prints,
which the site also ships as reference/study.schema.json, and the layer diagram from the
README's "Design" section, which the site cannot link to. A page asks for one with its marker
line.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from typer.cli import get_docs_for_click

from hvbench.cli import app
from hvbench.cli.study_schema import study_schema

SCHEMA_FILE = "reference/study.schema.json"
README = Path(__file__).parents[2] / "README.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, SCHEMA_FILE, content=json.dumps(study_schema(), indent=2)))
    return files


def cli_reference() -> str:
    """Every command with its usage, arguments and options, a heading each (## hvbench, ###
    hvbench run, #### hvbench study check)."""
    command = typer.main.get_command(app)
    return get_docs_for_click(obj=command, ctx=typer.Context(command), name="hvbench", indent=1)


def study_file_reference() -> str:
    """The study file's settings, a table per model: the top level, each driver's settings, each
    workload's, then what they hold (disks, adaptive repetitions, a claim)."""
    schema = study_schema()
    defs: dict[str, Any] = schema["$defs"]
    props = schema["properties"]
    platforms = [_ref_name(r) for r in props["platforms"]["additionalProperties"]["anyOf"]]
    workloads = [_ref_name(r) for r in props["workloads"]["items"]["anyOf"]]
    nested = [name for name in defs if name not in {*platforms, *workloads}]
    sections = (
        ("Platforms", platforms, ()),
        ("Workloads", workloads, ("name", "tool", "suite")),
        ("Parts", nested, ()),
    )
    out = ["## The top level", "", *_model(schema)]
    for title, names, picks in sections:
        out += [f"## {title}", ""]
        for name in names:
            out += [f"### {name} {{#{name}}}", "", *_picked_by(defs[name], picks)]
            out += _model(defs[name])
    return "\n".join(out)


def readme_layers() -> str:
    """The README's "Design" section, its heading left out: the layer diagram."""
    section = re.search(r"^## Design\n(.*?)(?=^## |\Z)", README.read_text(), re.M | re.S)
    if section is None:
        raise ValueError(f"{README} has no '## Design' section")
    return section.group(1).strip()


GENERATED: dict[str, Callable[[], str]] = {
    "<!-- generated: cli -->": cli_reference,
    "<!-- generated: study file -->": study_file_reference,
    "<!-- generated: layers -->": readme_layers,
}
"""A marker line, and what replaces it."""


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    for marker, make in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


def _ref_name(schema: dict[str, Any]) -> str:
    return schema["$ref"].removeprefix("#/$defs/")


def _picked_by(schema: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """The line that says which settings pick a model: name: disk, tool: fio."""
    props = schema["properties"]
    picks = [f"`{k}:` {_type(props[k])}" for k in keys if k in props and not _is_open(props[k])]
    return [f"Picked by {', '.join(picks)}.", ""] if picks else []


def _is_open(schema: dict[str, Any]) -> bool:
    return "enum" not in schema and "const" not in schema


def _model(schema: dict[str, Any]) -> list[str]:
    """A model's description, then a row per setting: its type, default and description."""
    described = _text(schema.get("description", ""))
    out = [described, ""] if described else []
    out += ["| setting | type | default | what |", "|---|---|---|---|"]
    required = set(schema.get("required", ()))
    for name, prop in schema["properties"].items():
        default = "required" if name in required else _code(prop.get("default"))
        what = _text(prop.get("description", "")).replace("\n\n", " ")
        out.append(f"| `{name}` | {_type(prop)} | {default} | {_cell(what)} |")
    return [*out, ""]


def _type(schema: dict[str, Any]) -> str:
    """A schema in a few words: `a` \\| `b`, list of ..., mapping of ..., > 0."""
    if "$ref" in schema:
        name = _ref_name(schema)
        return f"[{name}](#{name})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(_code(v) for v in schema["enum"])
    if "const" in schema:
        return _code(schema["const"])
    kind = schema.get("type", "any")
    if kind == "array":
        kind = f"list of {_type(schema.get('items', {}))}"
    elif kind == "object":
        values = schema.get("additionalProperties", {})
        kind = f"mapping to {_type(values)}" if isinstance(values, dict) else "mapping"
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (
            ("exclusiveMinimum", ">"),
            ("minimum", "≥"),
            ("exclusiveMaximum", "<"),
            ("maximum", "≤"),
            ("minItems", "items ≥"),
            ("minLength", "length ≥"),
        )
        if key in schema
    ]
    return f"{kind} ({', '.join(bounds)})" if bounds else kind


def _code(value: Any) -> str:
    """A value as a study writes it: a string bare, anything else (and the empty string) as
    JSON, which YAML reads the same."""
    text = value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False)
    return f"`{text}`"


def _text(docstring: str) -> str:
    """A docstring's paragraphs, each on one line."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
