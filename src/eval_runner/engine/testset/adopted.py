"""Coder's defaults as a run's arms admit them (runner.md §12): which programs and skills each arm holds when
a `coder-defaults` release adopts catalog tools, and what each arm's lock says of them (§13.11).

The service reads the release and resolves the adopted tools against its catalog
(`service.releases.defaults`); the engine only needs the result: the release, the exact bytes of its lock
document, and the adopted subjects.
"""

from __future__ import annotations

from dataclasses import dataclass

from eval_runner.contracts.coder_defaults import LOCK_SCHEMA as DEFAULTS_LOCK_SCHEMA
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, digest_bytes
from eval_runner.engine.testset.catalog import JSON_MEDIA, Program, Skill, Subject


@dataclass(frozen=True, slots=True)
class AdoptedDefaults:
    """Coder's defaults as both arms admit them (runner.md §12): the `coder-defaults` release, the exact
    bytes of its lock document, and the adopted tools this catalog holds. Both arms admit these subjects'
    programs and skills, so a report is marginal; the subject arm adds the subject on top (nothing when
    the subject is itself a default)."""

    release: EventRef
    lock: bytes
    subjects: tuple[Subject, ...] = ()

    def holds(self, subject: Subject) -> bool:
        """Is `subject` one of the defaults (same id, same bytes)?"""
        return any(
            held.definition.id == subject.definition.id
            and held.definition.artifact.digest == subject.definition.artifact.digest
            for held in self.subjects
        )

    def admitted(self, subject: Subject | None) -> tuple[tuple[Program, ...], tuple[Skill, ...]]:
        """The programs and skills an arm admits: the defaults', then `subject`'s (None for the baseline). A
        subject's program or skill of a default's slug or name takes the default's place, so a new version of
        an adopted tool is what its arm runs (and what its lock names), not the adopted one."""
        programs: dict[str, Program] = {}
        skills: dict[str, Skill] = {}
        for held in self.subjects:
            for program in held.programs:
                programs.setdefault(program.slug, program)
            for skill in held.skills:
                skills.setdefault(skill.name, skill)
        if subject is not None and not self.holds(subject):
            programs.update((program.slug, program) for program in subject.programs)
            skills.update((skill.name, skill) for skill in subject.skills)
        return tuple(programs.values()), tuple(skills.values())

    def lock_json(self) -> dict[str, JsonValue]:
        """What each arm's lock says of the defaults: the release, its lock document, and each adopted
        subject's definition with its programs' and skills' digests (runner.md §13.11)."""
        return {
            "release": self.release.to_json(),
            "lock": ArtifactRef.of_bytes(self.lock, JSON_MEDIA, DEFAULTS_LOCK_SCHEMA).to_json(),
            "subjects": [
                {
                    "definition": held.definition.to_json(),
                    "programs": [
                        {"slug": p.slug, "digest": digest_bytes(p.data), "size": len(p.data)} for p in held.programs
                    ],
                    "skills": [
                        {"name": s.name, "digest": digest_bytes(s.data), "size": len(s.data)} for s in held.skills
                    ],
                }
                for held in self.subjects
            ],
        }
