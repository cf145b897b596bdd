"""Console forms: they parse operator input; the services decide what is allowed."""

from __future__ import annotations

import hashlib
import re
from typing import Any, cast

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from accounts.models import (
    CATEGORY_RE,
    MAX_EXTRACTION_OPERATIONS,
    Agent,
    Extraction,
    Scope,
    retention_json,
    validate_retention,
)
from accounts.services import EXTRACTION_POLICY_FIELDS
from memories import validation
from memories.secrets_scan import scan_secrets
from memories.services.policies import retention_changes
from memoryhub.durations import format_duration, parse_duration
from memoryhub.errors import InvalidInput, SecretRejected

CATEGORY_PATTERN = re.compile(CATEGORY_RE)


def normalise_newlines(text: str) -> str:
    """Browsers submit a textarea with CRLF line ends; memories keep LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def text_digest(text: str) -> str:
    return hashlib.sha256(normalise_newlines(text).encode()).hexdigest()


class SecretScannedForm(forms.Form):
    """A form whose free-text fields (`SCANNED`, named as `SECRET_SCANNED_FIELDS` names them)
    go through the shared secret scan before anything else. A secret is taken out of the
    submitted data, so the re-rendered form cannot show it back, and its field carries the
    refusal (the rule, never the value)."""

    SCANNED: tuple[str, ...] = ()

    def __init__(self, data=None, *args, **kwargs):
        self.secret_errors: dict[str, str] = {}
        if data is not None:
            data = data.copy()
            for name in self.SCANNED:
                try:
                    scan_secrets({name: data.get(name)})
                except SecretRejected as exc:
                    data[name] = ""
                    self.secret_errors[name] = (
                        f"A secret-shaped value ({exc.details['rule']}) is never stored; "
                        "it was taken out of the form."
                    )
        super().__init__(data, *args, **kwargs)

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean gives cleaned_data
        for name, message in self.secret_errors.items():
            self.add_error(name, message)
        return data


def _normal_tags(tags: list[str]) -> list[str]:
    """Tags as the service will store them, so `Billing` vs `billing` is no change; a bad tag
    stays as typed and the service names the error."""
    out = []
    for tag in tags:
        try:
            out.append(validation.normalise_tag(tag))
        except InvalidInput:
            out.append(tag)
    return list(dict.fromkeys(out))


class CorrectionForm(SecretScannedForm):
    """`Edit` → `Save`: a correction, compare-and-set against `expected_version`.

    `base` carries the edited fields as the form was loaded (the text as a digest): what the
    operator changed is what differs from it, so a Save after a conflict applies only the
    operator's own edits and never reverts what someone else changed meanwhile.
    """

    FIELDS = ("text", "tags", "category", "kind", "importance", "confidence")
    SCANNED = ("text", "tags", "category", "kind")

    # strip=False: saving a tag change must not rewrite the text's leading/trailing whitespace.
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 8}), required=False, strip=False)
    tags = forms.CharField(required=False, help_text="Comma-separated")
    category = forms.CharField(max_length=40)
    kind = forms.CharField(max_length=64)
    importance = forms.FloatField(min_value=0, max_value=1)
    confidence = forms.FloatField(min_value=0, max_value=1)
    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    base = forms.JSONField(widget=forms.HiddenInput)

    @classmethod
    def base_of(cls, memory) -> dict[str, Any]:
        """The comparable values of the edited fields (the `base` of a form loaded now)."""
        return {
            "text": text_digest(memory.text),
            "tags": _normal_tags(memory.tags),
            "category": memory.category,
            "kind": memory.kind,
            "importance": memory.importance,
            "confidence": memory.confidence,
        }

    @staticmethod
    def display_values(memory) -> dict[str, Any]:
        """The edited fields as the form shows them."""
        return {
            "text": memory.text,
            "tags": ", ".join(memory.tags),
            "category": memory.category,
            "kind": memory.kind,
            "importance": memory.importance,
            "confidence": memory.confidence,
        }

    @classmethod
    def for_memory(cls, memory, **kwargs) -> CorrectionForm:
        initial = {
            **cls.display_values(memory),
            "expected_version": memory.version,
            "base": cls.base_of(memory),
        }
        return cls(initial=initial, **kwargs)

    def clean_text(self) -> str:
        return normalise_newlines(self.cleaned_data["text"])

    def clean_base(self) -> dict[str, Any]:
        base = self.cleaned_data["base"]
        if not isinstance(base, dict) or set(base) != set(self.FIELDS):
            raise forms.ValidationError("This form is out of date; reload the page and edit again.")
        return base

    def proposed(self) -> dict[str, Any]:
        """Every edited field as submitted, parsed."""
        data = self.cleaned_data
        return {
            "text": data["text"],
            "tags": [t.strip() for t in data["tags"].split(",") if t.strip()],
            "category": data["category"].strip(),
            "kind": data["kind"].strip(),
            "importance": data["importance"],
            "confidence": data["confidence"],
        }

    def changes(self) -> dict[str, Any]:
        """Only the fields the operator changed, relative to the version the form was loaded
        with (not to the memory as it is now)."""
        base = self.cleaned_data["base"]
        return {
            name: value
            for name, value in self.proposed().items()
            if _comparable(name, value) != base[name]
        }


def _comparable(name: str, value: Any) -> Any:
    if name == "text":
        return text_digest(value)
    if name == "tags":
        return _normal_tags(value)
    return value


class TombstoneForm(SecretScannedForm):
    SCANNED = ("reason",)

    reason = forms.CharField(max_length=500, required=False)


class AgentCreateForm(SecretScannedForm):
    SCANNED = ("name",)

    slug = forms.SlugField(max_length=63, help_text="a-z, 0-9, _ and -")
    name = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, tenant=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_slug(self):
        slug = self.cleaned_data["slug"].lower()
        if Agent.objects.for_tenant(self.tenant).filter(slug=slug).exists():
            raise forms.ValidationError("An agent with this slug exists already.")
        return slug


class DurationField(forms.CharField):
    def to_python(self, value):
        value = super().to_python(value)
        if not value:
            return None
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def prepare_value(self, value):
        return format_duration(value) if hasattr(value, "total_seconds") else value


class AgentPolicyForm(forms.Form):
    entry_cap = forms.IntegerField(min_value=1, label="Entry cap")
    hydration_budget_bytes = forms.IntegerField(min_value=0, label="Hydration budget (bytes)")
    default_category = forms.RegexField(
        regex=r"^[a-z0-9_-]{1,40}$", max_length=40, label="Default category"
    )
    dedup_threshold = forms.FloatField(min_value=0, max_value=1, label="Dedup threshold")
    default_ttl = DurationField(
        required=False, label="Default TTL", help_text="e.g. 7d; empty: none"
    )
    reads_from = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Reads from"
    )
    # Memory formation. Optional in a post: a field left out keeps its value, so a
    # client that only knows the fields above changes nothing else.
    extraction = forms.ChoiceField(
        choices=Extraction.choices,
        required=False,
        label="Extraction",
        help_text="off: conversations are only stored · review: every extracted memory waits "
        "for review · auto: only those below “Review below” wait",
    )
    extraction_idle_seconds = forms.IntegerField(
        min_value=0, required=False, label="Extract after idle (seconds)"
    )
    extraction_min_confidence = forms.FloatField(
        min_value=0,
        max_value=1,
        required=False,
        label="Minimum confidence",
        help_text="An extracted operation less confident than this is dropped",
    )
    review_below = forms.FloatField(
        min_value=0,
        max_value=1,
        required=False,
        label="Review below",
        help_text="An extracted memory less confident than this waits in the review queue",
    )
    extraction_categories = forms.CharField(
        max_length=500,
        required=False,
        label="Extraction categories",
        help_text="Comma-separated: the categories extraction may add to",
    )
    summary_threshold_bytes = forms.IntegerField(
        min_value=1000,
        required=False,
        label="Summary threshold (bytes)",
        help_text="Older messages are summarised once the unsummarised ones exceed this",
    )
    extraction_max_operations = forms.IntegerField(
        min_value=1,
        max_value=MAX_EXTRACTION_OPERATIONS,
        required=False,
        label="Operations per answer",
        help_text="The most operations one model answer may apply; the rest are dropped",
    )
    context_messages = forms.IntegerField(
        min_value=0,
        max_value=200,
        required=False,
        label="Earlier messages shown",
        help_text="Messages before the new ones the model sees, read-only, to resolve references",
    )
    formation_user_scope = forms.TypedChoiceField(
        choices=[("true", "yes"), ("false", "no")],
        coerce=lambda value: value == "true",
        required=False,
        label="Form user-scoped memories",
        help_text="Facts about the person that hold for every agent serving them",
    )
    # Hydrate's block limits and retention.
    core_max_entries = forms.IntegerField(
        min_value=0, required=False, label="Core entries per block"
    )
    core_max_chars = forms.IntegerField(
        min_value=0, required=False, label="Core characters per block"
    )
    archival_max_chars = forms.IntegerField(
        min_value=0, required=False, label="Archival characters"
    )
    max_retention = forms.CharField(
        max_length=1000,
        required=False,
        label="Max retention",
        help_text="CATEGORY=DURATION, comma-separated (daily=72h, core=365d); wins over the "
        "tenant's; empty: the tenant's",
    )

    EXTRACTION_FIELDS = (*EXTRACTION_POLICY_FIELDS, "context_messages", "formation_user_scope")
    LIMIT_FIELDS = ("core_max_entries", "core_max_chars", "archival_max_chars")
    # Optional in a post: a field left out keeps its value.
    OPTIONAL_FIELDS = (*EXTRACTION_FIELDS, *LIMIT_FIELDS, "max_retention")

    def __init__(self, *args, agent: Agent, others: list[Agent], **kwargs):
        kwargs.setdefault(
            "initial",
            {
                "entry_cap": agent.entry_cap,
                "hydration_budget_bytes": agent.hydration_budget_bytes,
                "default_category": agent.default_category,
                "dedup_threshold": agent.dedup_threshold,
                "default_ttl": agent.default_ttl,
                "reads_from": [a.slug for a in agent.reads_from.all()],
                "extraction": agent.extraction,
                "extraction_idle_seconds": agent.extraction_idle_seconds,
                "extraction_min_confidence": agent.extraction_min_confidence,
                "review_below": agent.review_below,
                "extraction_categories": ", ".join(agent.extraction_categories),
                "summary_threshold_bytes": agent.summary_threshold_bytes,
                "extraction_max_operations": agent.extraction_max_operations,
                "context_messages": agent.context_messages,
                "formation_user_scope": "true" if agent.formation_user_scope else "false",
                "core_max_entries": agent.core_max_entries,
                "core_max_chars": agent.core_max_chars,
                "archival_max_chars": agent.archival_max_chars,
                "max_retention": retention_text(agent.max_retention),
            },
        )
        super().__init__(*args, **kwargs)
        self.fields["reads_from"].choices = [  # type: ignore[attr-defined]  # a choice field
            (a.slug, a.slug) for a in others
        ]

    def clean_extraction_categories(self) -> list[str]:
        raw = self.cleaned_data["extraction_categories"]
        categories = list(dict.fromkeys(c.strip().lower() for c in raw.split(",") if c.strip()))
        bad = [c for c in categories if not CATEGORY_PATTERN.fullmatch(c)]
        if bad:
            raise forms.ValidationError(f"“{bad[0]}” is not a category (a-z, 0-9, _ and -).")
        return categories

    def clean_max_retention(self) -> dict[str, int]:
        return retention_field(self.cleaned_data["max_retention"])

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean gives cleaned_data
        for name in self.OPTIONAL_FIELDS:
            if name not in self.data:
                data.pop(name, None)  # left out of the post: unchanged
            elif name == "max_retention":
                continue  # empty: none of its own
            elif name in data and data[name] in (None, "", []):
                self.add_error(
                    name,
                    "Name at least one category, or turn extraction off."
                    if name == "extraction_categories"
                    else "This field is required.",
                )
        return data

    def groups(self) -> list[tuple[str, list]]:
        """The fields as the page shows them: the memory policy, hydrate's limits and
        retention, then formation's."""
        later = (*self.EXTRACTION_FIELDS, *self.LIMIT_FIELDS, "max_retention")
        return [
            ("Memories", [f for f in self if f.name not in later]),
            ("Hydration limits", [self[name] for name in self.LIMIT_FIELDS]),
            ("Retention", [self["max_retention"]]),
            ("Memory formation", [f for f in self if f.name in self.EXTRACTION_FIELDS]),
        ]


def retention_text(stored: dict[str, int]) -> str:
    """A stored `max_retention` as the form shows it: `core=365d, daily=72h`."""
    return ", ".join(f"{c}={d}" for c, d in retention_json(stored).items())


def retention_field(raw: str) -> dict[str, int]:
    """The form's `CATEGORY=DURATION, …` as a whole policy (what it says replaces it)."""
    parts = [part for part in re.split(r"[,\n]", raw or "") if part.strip()]
    try:
        policy = retention_changes({}, parts)
        validate_retention(policy)
    except InvalidInput as exc:
        raise forms.ValidationError(exc.message) from None
    except ValidationError as exc:
        raise forms.ValidationError(exc.messages[0]) from None
    return policy


class TenantPolicyForm(forms.Form):
    """The tenant's memory policy: the Tenant page."""

    user_cap = forms.IntegerField(
        min_value=0,
        label="User memories per subject",
        help_text="Live user-scoped memories a subject may have before the coldest is evicted",
    )
    max_retention = forms.CharField(
        max_length=1000,
        required=False,
        label="Max retention",
        help_text="CATEGORY=DURATION, comma-separated (daily=72h, core=365d); an agent's own "
        "entry for a category wins",
    )

    def clean_max_retention(self) -> dict[str, int]:
        return retention_field(self.cleaned_data["max_retention"])


class ApiKeyCreateForm(SecretScannedForm):
    """A new key; `memory_ttl` bounds every memory written through it."""

    SCANNED = ("name", "subject_id")

    name = forms.CharField(max_length=200, required=False)
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        initial=[Scope.READ, Scope.WRITE],
        widget=forms.CheckboxSelectMultiple,
    )
    subject_id = forms.CharField(max_length=255, required=False, label="Bound subject")
    expires_in = DurationField(required=False, label="Expires in", help_text="e.g. 30d")
    memory_ttl = DurationField(
        required=False,
        label="Memory TTL",
        help_text="e.g. 24h: memories written through this key live at most this long",
    )


class ExtractionBudgetForm(forms.Form):
    tokens = forms.IntegerField(
        min_value=0,
        label="Daily token budget",
        help_text="LLM tokens extraction may spend per UTC day, all agents together; 0: no limit",
    )


class ImportForm(forms.Form):
    file = forms.FileField(label="JSONL file")


class MemberForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(
        choices=[
            ("viewer", "Viewer"),
            ("reviewer", "Reviewer"),
            ("admin", "Admin"),
            ("owner", "Owner"),
        ]
    )
    password = forms.CharField(
        widget=forms.PasswordInput, required=False, help_text="Only for a new operator"
    )

    def clean_email(self) -> str:
        return self.cleaned_data["email"].lower()

    def clean(self) -> dict[str, Any]:
        """A new operator needs a password; an existing one keeps theirs (`password` None)."""
        data = cast(dict[str, Any], super().clean())  # Form.clean gives cleaned_data
        email = data.get("email")
        if email is None:
            return data
        if get_user_model().objects.filter(username=email).exists():
            data["password"] = None
        elif not data.get("password"):
            self.add_error("password", "A new operator needs a password.")
        return data
