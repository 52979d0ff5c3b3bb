"""What a fleet counts together in its shared ledger: the brake's day counts and the usage lines.

One runner keeps its day's counts in `<state>/quota.json` and its usage lines in `<state>/usage/`. In a
fleet those would hold per machine, so with `EVAL_RUNNER_DATABASE` they are rows of the shared database:
`day_runs` (runs per trainer per UTC day) and `day_turns` (turns per day), each count one write
transaction under the key's writer lock, so the brake is exact however many runners admit at once; and
`usage_lines`, one row per answered request, written by the runner that answered, read by `usage`.
"""

from __future__ import annotations

from collections.abc import Mapping

from eval_runner.service.ledger.backend import Db, LedgerStorage


class CountRecords(LedgerStorage):
    """The brake's counts and the usage lines of one runner key."""

    def count(
        self, trainer: str, turns: int, *, run: bool, day: int, runs_brake: int | None, turns_brake: int | None
    ) -> bool:
        """Count one run for `trainer` (when `run`) and `turns` turns on `day`, unless a set brake would be
        exceeded (then nothing is counted and False comes back)."""
        with self._write() as db:
            used, total = self._counted(db, trainer, day)
            if (run and runs_brake is not None and used >= runs_brake) or (
                turns_brake is not None and total + turns > turns_brake
            ):
                return False
            self._add(db, trainer, day, 1 if run else 0, turns)
            return True

    def uncount(self, trainer: str, turns: int, *, run: bool, day: int) -> None:
        """Give back what `count` took (never below zero)."""
        with self._write() as db:
            used, total = self._counted(db, trainer, day)
            self._add(db, trainer, day, -min(used, 1 if run else 0), -min(total, turns))

    def day_counts(self, day: int) -> tuple[Mapping[str, int], int]:
        """The runs by trainer and the turns counted on `day`."""
        with self._read() as db:
            runs = {
                row["trainer"]: int(row["runs"])
                for row in db.execute(
                    "SELECT trainer, runs FROM day_runs WHERE worker = ? AND day = ? AND runs > 0", (self.worker, day)
                )
            }
            found = db.execute(
                "SELECT turns FROM day_turns WHERE worker = ? AND day = ?", (self.worker, day)
            ).fetchone()
            return runs, 0 if found is None else int(found["turns"])

    def _counted(self, db: Db, trainer: str, day: int) -> tuple[int, int]:
        runs = db.execute(
            "SELECT runs FROM day_runs WHERE worker = ? AND day = ? AND trainer = ?", (self.worker, day, trainer)
        ).fetchone()
        turns = db.execute("SELECT turns FROM day_turns WHERE worker = ? AND day = ?", (self.worker, day)).fetchone()
        return (0 if runs is None else int(runs["runs"])), (0 if turns is None else int(turns["turns"]))

    def _add(self, db: Db, trainer: str, day: int, runs: int, turns: int) -> None:
        """Add to the day's counts (a row is made by the first count; a giving back only lowers one)."""
        if runs > 0:
            db.execute(
                "INSERT INTO day_runs (worker, day, trainer, runs) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (worker, day, trainer) DO UPDATE SET runs = day_runs.runs + excluded.runs",
                (self.worker, day, trainer, runs),
            )
        elif runs < 0:
            db.execute(
                "UPDATE day_runs SET runs = runs + ? WHERE worker = ? AND day = ? AND trainer = ?",
                (runs, self.worker, day, trainer),
            )
        if turns > 0:
            db.execute(
                "INSERT INTO day_turns (worker, day, turns) VALUES (?, ?, ?) "
                "ON CONFLICT (worker, day) DO UPDATE SET turns = day_turns.turns + excluded.turns",
                (self.worker, day, turns),
            )
        elif turns < 0:
            db.execute("UPDATE day_turns SET turns = turns + ? WHERE worker = ? AND day = ?", (turns, self.worker, day))

    def keep_usage(self, day: str, line: str) -> None:
        """Append one usage line (the record's JSON) under its UTC day (`YYYY-MM-DD`)."""
        with self._unlocked_write() as db:  # an insert alone, read by no rule: no need to wait for the writers
            db.execute("INSERT INTO usage_lines (worker, day, line) VALUES (?, ?, ?)", (self.worker, day, line))

    def usage_lines(self, since: str | None = None) -> tuple[str, ...]:
        """Every usage line of this key in the order written, from the day `since` on (all when None)."""
        with self._read() as db:
            rows = db.execute(
                "SELECT line FROM usage_lines WHERE worker = ? AND day >= ? ORDER BY day, rowid",
                (self.worker, since or ""),
            ).fetchall()
            return tuple(row["line"] for row in rows)
