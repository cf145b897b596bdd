"""Console forms: they parse operator input; the services decide what is allowed."""

from __future__ import annotations

from django import forms

from accounts.models import Agent, Scope
from memoryhub.durations import format_duration, parse_duration


class CorrectionForm(forms.Form):
    """`Edit` → `Save`: a correction, compare-and-set against `expected_version`."""

    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 8}), required=False)
    tags = forms.CharField(required=False, help_text="Comma-separated")
    category = forms.CharField(max_length=40)
    kind = forms.CharField(max_length=64)
    importance = forms.FloatField(min_value=0, max_value=1)
    confidence = forms.FloatField(min_value=0, max_value=1)
    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)

    @classmethod
    def for_memory(cls, memory, **kwargs) -> CorrectionForm:
        return cls(
            initial={
                "text": memory.text,
                "tags": ", ".join(memory.tags),
                "category": memory.category,
                "kind": memory.kind,
                "importance": memory.importance,
                "confidence": memory.confidence,
                "expected_version": memory.version,
            },
            **kwargs,
        )

    def changes(self, memory) -> dict:
        """Only the fields the operator actually changed."""
        data = self.cleaned_data
        proposed = {
            "text": data["text"],
            "tags": [t.strip() for t in data["tags"].split(",") if t.strip()],
            "category": data["category"].strip(),
            "kind": data["kind"].strip(),
            "importance": data["importance"],
            "confidence": data["confidence"],
        }
        return {k: v for k, v in proposed.items() if getattr(memory, k) != v}


class TombstoneForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False)


class AgentCreateForm(forms.Form):
    slug = forms.SlugField(max_length=63, help_text="a-z, 0-9, _ and -")
    name = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, tenant=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_slug(self):
        slug = self.cleaned_data["slug"].lower()
        if Agent.objects.filter(tenant=self.tenant, slug=slug).exists():
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
            },
        )
        super().__init__(*args, **kwargs)
        self.fields["reads_from"].choices = [(a.slug, a.slug) for a in others]


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=200, required=False)
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        initial=[Scope.READ, Scope.WRITE],
        widget=forms.CheckboxSelectMultiple,
    )
    subject_id = forms.CharField(max_length=255, required=False, label="Bound subject")
    expires_in = DurationField(required=False, label="Expires in", help_text="e.g. 30d")


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
