"""A stand-in for the relay's write side: it takes every event the runner publishes and keeps it, in order.

Tests that drive `Pipeline.handle` directly (thousands of times, in the fuzz) need to see everything the
runner sent without a relay round trip per answer; what a relay does with the events is proven by the
tests over LocalRelay. `StandInPublisher` obeys `service.answers.EventPublisher`.
"""

from __future__ import annotations

from eval_runner.nostr import Event, tag_values


class StandInPublisher:
    """Records every published event; `mark()` and `since(mark)` give what one step published."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)

    def mark(self) -> int:
        return len(self.events)

    def since(self, mark: int) -> list[Event]:
        return self.events[mark:]

    def about(self, event_id: str) -> list[Event]:
        """Every published event that names `event_id` in an `e` tag."""
        return [event for event in self.events if event_id in tag_values(event, "e")]
