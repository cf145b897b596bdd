"""The kind registry over REST (docs/memory-model.md#kinds): `GET /api/v1/kinds`, `GET/PUT/DELETE
/api/v1/kinds/{name}`. Reads need `read`, writes `admin` and a key not bound to a subject;
thin views over `memories.kind_registry` and `memories.services.kind_changes`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from memories import kind_registry
from memories.api import kind_schema, schema
from memories.api.views import AgentAPIView
from memories.serialization import kind_json
from memories.services import kind_changes


class KindsView(AgentAPIView):
    @extend_schema(
        operation_id="kinds_list",
        summary="The tenant's kinds",
        description=(
            "Every kind registered for the key's tenant, by name: cardinality, memory type, the "
            "description shown to models, the JSON Schema of `data`, the default category and "
            "the MCP tool that stores it. A kind not listed is a free label (it behaves as "
            "`fact`)."
        ),
        responses={200: kind_schema.KindsResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        request.user.require_scope("read")
        registry = kind_registry.registry(request.user.tenant)
        return Response({"ok": True, "kinds": [kind_json(kind) for kind in registry.kinds]})


class KindView(AgentAPIView):
    @extend_schema(
        operation_id="kinds_get",
        summary="One kind",
        description=(
            "One kind of the key's tenant by name: its definition and its MCP tool. 404 for a "
            "name the tenant has not registered (a free label)."
        ),
        parameters=[kind_schema.KIND_NAME_PARAM],
        responses={200: kind_schema.KindResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request, name: str):
        request.user.require_scope("read")
        kind = kind_changes.kind_get(tenant=request.user.tenant, name=name)
        return Response({"ok": True, "kind": kind_json(kind)})

    @extend_schema(
        operation_id="kinds_put",
        summary="Define or redefine a kind (admin)",
        description=(
            "Needs the admin scope and a key not bound to a subject (a kind is the whole "
            "tenant's). The whole definition (omitted fields take their defaults): 201 when the "
            "kind is new, 200 when it replaced one. The schema must be a valid JSON Schema (draft "
            "2020-12) describing an object. 409 CONFLICT when live memories of the kind would "
            "break it: a schema their data no longer satisfies, or `single` while an owner and "
            "subject have several (`details.memory_ids` names the first ones)."
        ),
        parameters=[kind_schema.KIND_NAME_PARAM],
        request=kind_schema.KindRequestSerializer,
        responses={
            200: kind_schema.KindResponseSerializer,
            201: kind_schema.KindResponseSerializer,
            **schema.WRITE_ERRORS,
        },
    )
    def put(self, request, name: str):
        request.user.require_tenant_wide("admin")
        kind, created = kind_changes.kind_save(
            tenant=request.user.tenant, name=name, data=request.data
        )
        return Response({"ok": True, "kind": kind_json(kind)}, status=201 if created else 200)

    @extend_schema(
        operation_id="kinds_delete",
        summary="Delete a kind (admin)",
        description=(
            "Needs the admin scope and a key not bound to a subject. Its name becomes a free "
            "label. 409 CONFLICT while live memories use it "
            "(`details.count`)."
        ),
        parameters=[kind_schema.KIND_NAME_PARAM],
        request=None,
        responses={200: kind_schema.KindDeletedSerializer, **schema.WRITE_ERRORS},
    )
    def delete(self, request, name: str):
        request.user.require_tenant_wide("admin")
        kind_changes.kind_delete(tenant=request.user.tenant, name=name)
        return Response({"ok": True, "deleted": True})
