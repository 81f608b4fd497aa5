"""The study file's JSON Schema (``hvbench study schema``), made from the pydantic models that
validate a study: the top level's, each driver's settings, each workload's and a claim's. An
editor with the YAML language server completes and checks a study with it as it is typed; what
the schema cannot say (a baseline among the platforms, a claim's metric among those its workload
produces) is still checked by ``hvbench study check``."""

from __future__ import annotations

import operator
from functools import reduce
from typing import Annotated, Any

from pydantic import Field, StringConstraints, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from hvbench.claim_schema import ClaimModel
from hvbench.drivers import EVERY_DRIVER
from hvbench.study import PLATFORM_NAME, StudyModel
from hvbench.units import format_size, parse_size
from hvbench.workloads import WORKLOADS

DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""The JSON Schema draft pydantic writes, named so that validators and editors need not guess."""
PlatformName = Annotated[str, StringConstraints(pattern=PLATFORM_NAME.pattern)]


def _is_size(schema: CoreSchema) -> bool:
    """A ``units.Size``: an int its validator also takes as 4G, 256K or 2GiB."""
    return schema["type"] == "function-before" and schema["function"]["function"] is parse_size


class _StudyJsonSchema(GenerateJsonSchema):
    """pydantic's schema, with a size's default as a study writes it (4G: pydantic writes a
    default as its Python value) and a key's pattern as what every key must match, as pydantic
    validates it (pydantic writes patternProperties, which leave keys that do not match
    unchecked)."""

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        out = super().dict_schema(schema)
        if "patternProperties" in out:
            ((pattern, values),) = out.pop("patternProperties").items()
            out |= {"propertyNames": {"pattern": pattern}, "additionalProperties": values}
        return out

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if _is_size(schema["schema"]) and isinstance(out.get("default"), int):
            out["default"] = format_size(out["default"])
        return out


def study_schema() -> dict[str, Any]:
    """The JSON Schema of a study file: the top level with its platforms as any driver's settings
    (libvirt's with a xen:// URI among them) and its workloads as any workload's."""
    platforms = [cls.settings_model for cls in EVERY_DRIVER]
    workloads = [cls.settings_model for by_tool in WORKLOADS.values() for cls in by_tool.values()]
    platform: Any = reduce(operator.or_, platforms)
    workload: Any = reduce(operator.or_, workloads)
    model = create_model(
        "Study",
        __base__=StudyModel,
        __doc__="An hvbench study: its platforms, workloads, instance counts and repetitions.",
        platforms=(dict[PlatformName, platform], Field(min_length=1)),
        workloads=(list[workload], Field(min_length=1)),
        expect=(list[ClaimModel], []),
    )
    return {"$schema": DIALECT, **model.model_json_schema(schema_generator=_StudyJsonSchema)}
