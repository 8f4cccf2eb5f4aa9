"""How many of our APIs and versions kio reads and writes back byte for byte (docs/kafka-codec.md).

For every (API, version) in protocol/kafka/apis.py, request and response, it
generates a few messages with the round-trip test's strategies, encodes them
with kafka-python, decodes them with kio and checks that kio writes the same
bytes back. Error codes are drawn from real Kafka codes, since kio refuses
unknown ones. Prints one line per pair that fails or is missing, then totals.

    pip install kio   # not a kraftpy dependency
    python benchmarks/kafka_codec_kio_coverage.py
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tests.unit.protocol.test_kafka_codec as round_trip
from kraftpy.protocol.kafka.codec import message_classes

_any_field = round_trip._field_strategy


def _field_with_known_error_codes(field, version: int) -> st.SearchStrategy:
    if field.name.endswith("error_code") and not field.is_array():
        return st.sampled_from([0, 1, 3, 35])
    return _any_field(field, version)


round_trip._field_strategy = _field_with_known_error_codes


def _checker(message_cls, version: int, write, read):
    @settings(phases=[Phase.generate], max_examples=3, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(round_trip._message_strategy(message_cls, version))
    def check(message) -> None:
        data = bytes(message.encode(version=version))
        decoded, end = read(data, 0)
        assert end == len(data)
        out = io.BytesIO()
        write(out, decoded)
        assert out.getvalue() == data

    return check


def main() -> None:
    passed, failed, missing = 0, 0, 0
    for api_key, version in round_trip.ALL_VERSIONS:
        for kind, load, index in (("request", load_request_schema, 0), ("response", load_response_schema, 1)):
            try:
                kio_cls = load(api_key, version)
            except Exception:
                print(f"missing in kio: api {api_key} v{version} {kind}")
                missing += 1
                continue
            write, read = entity_writer(kio_cls), entity_reader(kio_cls)

            check = _checker(message_classes(api_key)[index], version, write, read)
            try:
                check()
                passed += 1
            except Exception as exc:
                print(f"fails in kio: api {api_key} v{version} {kind}: {type(exc).__name__}: {str(exc)[:120]}")
                failed += 1
    print(f"{passed} pass, {failed} fail, {missing} missing, of {passed + failed + missing}")


if __name__ == "__main__":
    main()
