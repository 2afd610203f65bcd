"""The pytest plugin as a user's suite meets it (pytester runs each suite in process): the
`minibroker` fixture with settings from the `minibroker` marker at module, class and test level,
SASL users, the factory for several brokers and for a restart on the same data, and docstrings that
`pytest --fixtures` and `pytest --markers` show."""

import pytest

from minibroker.handlers import load_all

pytest_plugins = ["pytester"]

# pytester's in-process runs forget the modules first imported during each run; the handler modules
# register themselves once in a registry that outlives them, so they are imported here first.
load_all()

# The user's tests talk to the broker the way a user's would: over the wire (minibroker's admin client).
HELPERS = '''
from minibroker.admin_client import AdminClient


def partition_count(bootstrap, topic, **sasl):
    """Partitions of `topic`, auto-created by the Metadata request (the broker's num.partitions)."""
    with AdminClient(bootstrap, **sasl) as client:
        response = client.call(3, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": True,
                                   "include_topic_authorized_operations": False,
                                   "include_cluster_authorized_operations": False})
        return len(response.topics[0].partitions)
'''


def run(pytester, source, *args):
    pytester.makepyfile(helpers=HELPERS)
    pytester.makepyfile(source)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_the_fixture_takes_settings_from_the_marker(pytester):
    result = run(pytester, '''
        import pytest
        from helpers import partition_count

        pytestmark = pytest.mark.minibroker(num_partitions=2, log_retention_ms=60000)


        def test_module_settings(minibroker):
            assert partition_count(minibroker.bootstrap, "t") == 2
            assert minibroker.broker.config["num.partitions"] == 2


        @pytest.mark.minibroker(num_partitions=5)
        def test_the_closest_marker_wins(minibroker):
            assert partition_count(minibroker.bootstrap, "t") == 5
            assert minibroker.broker.config.log_config.retention_ms == 60000  # the module's, kept


        @pytest.mark.minibroker({"num.partitions": 3, "auto.create.topics.enable": "true"})
        class TestDottedNames:
            def test_a_dict_of_kafka_names(self, minibroker):
                assert partition_count(minibroker.bootstrap, "t") == 3

            @pytest.mark.minibroker(num_partitions=4)
            def test_test_over_class(self, minibroker):
                assert partition_count(minibroker.bootstrap, "t") == 4


        def test_each_test_has_its_own_broker(minibroker, tmp_path):
            assert minibroker.data_dir.parent == tmp_path and minibroker.port != 0
    ''')
    result.assert_outcomes(passed=5)


def test_sasl_users_from_the_marker(pytester):
    result = run(pytester, '''
        import pytest
        from minibroker.admin_client import AdminClientError
        from helpers import partition_count


        @pytest.mark.minibroker(sasl_users={"alice": "alice-secret"}, num_partitions=2)
        def test_sasl(minibroker):
            assert partition_count(minibroker.sasl_bootstrap, "t", sasl_mechanism="SCRAM-SHA-256",
                                   sasl_username="alice", sasl_password="alice-secret") == 2
            with pytest.raises(AdminClientError):
                partition_count(minibroker.sasl_bootstrap, "t", sasl_mechanism="PLAIN",
                                sasl_username="alice", sasl_password="wrong")


        def test_no_sasl_without_users(minibroker):
            assert minibroker.sasl_bootstrap is None
    ''')
    result.assert_outcomes(passed=2)


def test_the_factory_starts_several_brokers_and_restarts_one(pytester):
    result = run(pytester, '''
        import pytest
        from helpers import partition_count


        @pytest.mark.minibroker(num_partitions=2)
        def test_several(minibroker_factory):
            first = minibroker_factory()
            second = minibroker_factory(num_partitions=3)
            assert first.port != second.port and first.data_dir != second.data_dir
            assert partition_count(first.bootstrap, "t") == 2  # the marker's
            assert partition_count(second.bootstrap, "t") == 3  # the call's over the marker's


        def test_restart_on_the_same_data(minibroker_factory):
            first = minibroker_factory(num_partitions=4)
            partition_count(first.bootstrap, "kept")
            minibroker_factory.stop(first)
            again = minibroker_factory(data_dir=first.data_dir)
            assert again.broker.logs.topic("kept").num_partitions == 4
            with pytest.raises(ValueError):
                minibroker_factory.stop(first)


        def test_the_fixture_and_the_factory_together(minibroker, minibroker_factory):
            other = minibroker_factory()
            assert other.bootstrap != minibroker.bootstrap
    ''')
    result.assert_outcomes(passed=3)


def test_brokers_are_stopped_when_the_test_ends(pytester):
    result = run(pytester, '''
        import socket
        import pytest

        ADDRESSES = []


        def test_start(minibroker, minibroker_factory):
            ADDRESSES.extend([(minibroker.host, minibroker.port), (minibroker_factory().host, 0)])
            ADDRESSES[1] = (ADDRESSES[1][0], minibroker_factory().port)


        def test_they_are_gone():
            for address in ADDRESSES:
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection(address, timeout=5).close()
    ''')
    result.assert_outcomes(passed=2)


def test_a_broker_that_cannot_start_fails_the_test_naming_the_key(pytester):
    result = run(pytester, '''
        import pytest


        @pytest.mark.minibroker(num_partitions=0)
        def test_bad(minibroker):
            pass
    ''')
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*num.partitions*"])


def test_a_marker_with_positional_values_is_refused(pytester):
    result = run(pytester, '''
        import pytest


        @pytest.mark.minibroker(3)
        def test_bad(minibroker):
            pass
    ''')
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*takes keyword settings*"])


def test_fixtures_and_marker_are_documented(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    fixtures = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--fixtures", "-v")
    fixtures.stdout.fnmatch_lines(["minibroker -- *", "*A broker for this test*",
                                   "*@pytest.mark.minibroker(num_partitions=3*"])
    fixtures.stdout.fnmatch_lines(["minibroker_factory -- *", "*A callable that starts a broker per call*",
                                   "*minibroker_factory(num_partitions=3)*"])
    markers = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.minibroker(*): settings of the brokers*"])


@pytest.mark.parametrize("bad", [{"num_partitions": "many"}])
def test_the_factory_names_a_bad_setting(bad, minibroker_factory):
    from minibroker.storage.config import ConfigError

    with pytest.raises(ConfigError, match="num.partitions"):
        minibroker_factory(**bad)
