"""A tool's published results over a real relay (nostr-sdk's LocalRelay): what one listing asks of the relay is
bounded (the newest results up to a limit, said when reached; the releases they name in chunks of ids)."""

from __future__ import annotations

from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.nostr import Event, Filter, SecretKey
from eval_runner.reader.listing import IDS_PER_QUERY, RESULTS_LIMIT, list_results
from eval_runner.service.relay.connection import RelayClient
from tests.support.published_results import (
    OTHER,
    TRAINER,
    Published,
    hosted_report,
    result_event,
    signed_request,
    suite_ref,
)


class Recorded:
    """The real relay client, with every filter it was asked remembered."""

    def __init__(self, client: RelayClient) -> None:
        self.client = client
        self.asked: list[Filter] = []

    async def query(self, filter_: Filter) -> list[Event]:
        self.asked.append(filter_)
        return await self.client.query(filter_)


async def test_a_listing_reads_the_newest_results_up_to_its_limit_and_says_when_it_was_reached(
    world: Published,
) -> None:
    other_suite, other_pointer = await world.release_suite(OTHER, "other-tests")
    events = []
    for number in range(3):
        request = signed_request(TRAINER)
        suite = None if number != 1 else suite_ref(other_suite, other_pointer)
        events.append(result_event(hosted_report(world, request, suite=suite), request, at=1_790_000_000 + number))
    for event in events:
        await world.relay.publish(event)
    subject = hosted_report(world, signed_request(TRAINER)).subject.definition
    relay = Recorded(RelayClient(world.relay_url, SecretKey.generate(), challenge_wait=0.05))

    listing = await list_results(relay, subject, limit=2, ids_per_query=1)
    assert listing.limit_reached
    listed = [entry.result.id for found in listing.groups for entry in found.entries]
    assert sorted(listed) == sorted(event.id for event in events[1:]), "the newest two"
    assert relay.asked[0].limit == 2
    releases = [asked for asked in relay.asked if asked.kinds == (RELEASE_KIND,)]
    assert [len(asked.ids or ()) for asked in releases] == [1, 1, 1], "three release ids, one per query"
    assert {found.release.id for found in listing.groups if found.release is not None} == {
        world.suite_pointer.id,
        other_pointer.id,
    }, "every chunk's release was read"

    assert (await list_results(relay, subject, limit=4)).limit_reached is False
    assert (RESULTS_LIMIT, IDS_PER_QUERY) == (500, 100)
