"""Tests for loading and validating the TOML configuration file."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from signoff.config.settings import (
    ApprovalMode,
    CronMode,
    NotifyEvent,
    Settings,
    SlackMode,
    check_config,
    load_settings,
)
from signoff.errors import ConfigError
from signoff.runtime.models import RiskClass, Scope

EXAMPLE = Path(__file__).resolve().parents[3] / "config.example.toml"
SLACK = '[slack]\nbot_token = "xoxb-1"\napp_token = "xapp-1"\nchannel = "C1"\n'

WriteConfig = Callable[[str], Path]


@pytest.fixture
def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteConfig:
    """Write config.toml in a fresh current directory and return its relative path."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> Path:
        path = Path("config.toml")
        path.write_text(text, encoding="utf-8")
        return path

    return write


def config_error(path: Path) -> str:
    """Load ``path`` expecting a ConfigError; return its message."""
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


# ------------------------------------------------------------------ loading


def test_example_config_loads_without_tokens() -> None:
    """config.example.toml loads as is, with two active recipes and no chat sections."""
    settings = load_settings(EXAMPLE)
    assert settings.slack is None and settings.telegram is None
    assert [r.name for r in settings.recipes] == ["summarize-readme", "tidy-up"]
    assert settings.recipes[0].steps[0].tool == "read_file"
    assert settings.recipes[0].regex.search("Please SUMMARIZE the readme")


def test_example_config_matches_the_defaults() -> None:
    """Apart from its recipes, the example file spells out exactly the embedded defaults."""
    settings = load_settings(EXAMPLE)
    assert settings.model_copy(update={"recipes": []}) == Settings.default()


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, TOML key) of every setting of ``model`` and its sub-sections."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}.{key}" if prefix else key
        yield path, key
        for arg in (field.annotation, *get_args(field.annotation)):
            for inner in (arg, *get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    yield from _keys(inner, path)


def test_example_config_shows_every_key() -> None:
    """The example's promise, "every key is shown", holds: each setting is written there,
    as itself or in a comment (event_loop and trusted_proxies were missing)."""
    text = EXAMPLE.read_text()
    missing = [path for path, key in _keys(Settings)
               if not re.search(rf"(^|[\s#{{,\[.]){re.escape(key)}(\s*=|\]|\.)", text, re.M)]
    assert missing == []


def test_defaults() -> None:
    """Settings.default() needs no file and has the documented defaults."""
    s = Settings.default()
    assert (s.daemon.host, s.daemon.port, s.daemon.max_retries) == ("127.0.0.1", 8080, 1)
    assert s.daemon.work_dir == Path("signoff-work") and s.daemon.database is None
    assert s.daemon.lease == timedelta(seconds=60)
    assert s.api.key is None and s.api.keys == []
    assert s.approvals.mode is ApprovalMode.MANUAL
    assert s.approvals.cron_mode is CronMode.DENY
    assert s.approvals.timeout == timedelta(minutes=30)
    assert s.approvals.autonomous_risks == [RiskClass.READ, RiskClass.DRAFT]
    assert s.approvals.scopes_for(RiskClass.SEND) == list(Scope)
    assert s.evaluation.strict_yolo is False
    assert s.policy.command_timeout == timedelta(seconds=60)
    assert s.planner.kind.value == "rules" and s.planner.timeout == timedelta(seconds=30)
    assert (s.email.host, s.email.port, s.email.starttls) == ("localhost", 25, False)
    assert s.slack is None and s.telegram is None
    assert s.schedules == [] and s.oncall.rotations == [] and s.notify == []


def test_no_path_and_empty_file_give_defaults(write_config: WriteConfig) -> None:
    """load_settings(None) and an empty file both yield the defaults."""
    assert load_settings(None) == Settings.default()
    assert load_settings(write_config("")) == Settings.default()


def test_settings_are_frozen() -> None:
    """Settings cannot be patched at runtime; overrides make a copy."""
    s = Settings.default()
    with pytest.raises(ValueError, match="frozen"):
        s.daemon.port = 9000  # type: ignore[misc]
    changed = s.model_copy(update={"daemon": s.daemon.model_copy(update={"port": 9000})})
    assert changed.daemon.port == 9000 and s.daemon.port == 8080


def test_missing_file_is_a_clear_error(write_config: WriteConfig) -> None:
    """A file that does not exist is named in the error."""
    assert config_error(Path("nope.toml")) == "nope.toml: config file not found"


def test_broken_toml_names_the_line(write_config: WriteConfig) -> None:
    """A TOML syntax error names the file, line and column and the parser's message."""
    message = config_error(write_config("[daemon]\nport = 8080\nhost = \n"))
    assert message.startswith("config.toml: line 3, column")
    assert "invalid TOML" in message


def test_an_unquoted_string_is_hinted(write_config: WriteConfig) -> None:
    """tomllib's bare "Invalid value" for `work_dir = ./w` says what is most likely wrong."""
    message = config_error(write_config("[daemon]\nwork_dir = ./w\n"))
    assert message == ('config.toml: line 2, column 12: invalid TOML: Invalid value '
                       '(a string needs quotes: key = "value")')


# ------------------------------------------------------------------ ${ENV}


def test_env_substitution(write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """${NAME} and ${NAME:-default} are replaced in every string, nested ones included."""
    monkeypatch.setenv("SO_HOST", "0.0.0.0")
    monkeypatch.setenv("SO_KEY", "s3cret")
    monkeypatch.delenv("SO_UNSET", raising=False)
    path = write_config(
        '[daemon]\nhost = "${SO_HOST}"\nport = "${SO_UNSET:-9090}"\n'
        '[api]\nkey = "${SO_KEY}"\n[[api.keys]]\nname = "ci"\nkey = "pre-${SO_KEY}-post"\n'
        '[policy]\nprohibit = ["${SO_UNSET:-SEND}", "$${SO_KEY}"]\n'
    )
    s = load_settings(path)
    assert s.daemon.host == "0.0.0.0" and s.daemon.port == 9090
    assert s.api.key == "s3cret" and s.api.keys[0].key == "pre-s3cret-post"
    assert s.policy.prohibit == ["SEND", "${SO_KEY}"]


def test_env_default_applies_to_empty_variable(write_config: WriteConfig) -> None:
    """An empty variable takes the :- default; an empty api.key means no key."""
    path = write_config('[daemon]\nhost = "${H:-localhost}"\n[api]\nkey = "${K:-}"\n')
    s = load_settings(path, environ={"H": ""})
    assert s.daemon.host == "localhost" and s.api.key is None


def test_missing_env_var_names_the_key(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset variable without a default is an error naming the key path and variable."""
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    path = write_config(SLACK.replace('"xoxb-1"', '"${SLACK_BOT_TOKEN}"'))
    message = config_error(path)
    assert message.startswith("config.toml: slack.bot_token: environment variable SLACK_BOT_TOKEN")
    assert "not set" in message
    # A token is to be exported, not given a default in the file.
    assert message.endswith("is not set (export SLACK_BOT_TOKEN=… where the daemon starts)")


def test_missing_env_var_of_a_plain_key_offers_a_default(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable in a key that holds no secret may take a default in the file instead."""
    monkeypatch.delenv("SIGNOFF_HOST", raising=False)
    message = config_error(write_config('[daemon]\nhost = "${SIGNOFF_HOST}"\n'))
    assert message == ("config.toml: daemon.host: environment variable SIGNOFF_HOST is not "
                       "set (set it, or write ${SIGNOFF_HOST:-default})")


# ------------------------------------------------------------------ key errors


def test_bad_duration_message(write_config: WriteConfig) -> None:
    """A bad duration names the file, the dotted key and the accepted forms."""
    message = config_error(write_config('[approvals]\ntimeout = "abc"\n'))
    assert message == (
        "config.toml: approvals.timeout: invalid duration 'abc' (use e.g. '30s', '15m', '2h')"
    )


def test_durations_parse_into_timedeltas(write_config: WriteConfig) -> None:
    """Duration keys accept the human syntax and plain seconds."""
    path = write_config('[approvals]\ntimeout = "1h30m"\n[daemon]\nlease = 5\n')
    s = load_settings(path)
    assert s.approvals.timeout == timedelta(minutes=90)
    assert s.daemon.lease == timedelta(seconds=5)


def test_zero_timeout_is_rejected(write_config: WriteConfig) -> None:
    """Timeouts must be longer than zero."""
    message = config_error(write_config('[approvals]\ntimeout = "0s"\n'))
    assert message == "config.toml: approvals.timeout: must be longer than 0s"


def test_remind_before_is_off_by_default_and_a_positive_duration() -> None:
    """No reminders unless asked for; "0s" is refused by name, "5m" is five minutes."""
    assert Settings.default().approvals.remind_before is None
    assert Settings.model_validate(
        {"approvals": {"remind_before": "5m"}}).approvals.remind_before == timedelta(minutes=5)


def test_zero_remind_before_is_rejected(write_config: WriteConfig) -> None:
    """A reminder at the moment of expiry is no reminder: refused, naming the key."""
    message = config_error(write_config('[approvals]\nremind_before = "0s"\n'))
    assert message == "config.toml: approvals.remind_before: must be longer than 0s"


def test_unknown_key_suggests_the_right_one(write_config: WriteConfig) -> None:
    """A misspelt key is an error that suggests the closest real key."""
    message = config_error(write_config('[approvals]\ntimout = "5m"\n'))
    assert message == "config.toml: approvals.timout: unknown key (did you mean 'timeout'?)"


def test_a_path_that_is_not_a_string_says_so_in_toml_words(write_config: WriteConfig) -> None:
    """Not pydantic's "valid path for <class 'pathlib.Path'>": the key, what it wants, the
    value given."""
    message = config_error(write_config("[daemon]\nwork_dir = 3\n"))
    assert message == "config.toml: daemon.work_dir: should be a path (a string), got 3"


def test_a_section_that_is_not_a_table_says_so_in_toml_words(write_config: WriteConfig) -> None:
    """Not pydantic's "valid dictionary or instance of DaemonSettings": a table is wanted."""
    message = config_error(write_config("daemon = 5\n"))
    assert message == ("config.toml: daemon: should be a table (a [section] with key = value "
                       "lines, or { key = value }), got 5")
    message = config_error(write_config("[policy]\nbudgets = 3\n"))
    assert message.startswith("config.toml: policy.budgets: should be a table")


def test_a_single_string_where_a_list_is_wanted_shows_the_list(write_config: WriteConfig) -> None:
    """`autonomous_risks = "READ"` is answered with the bracketed form to write instead."""
    message = config_error(write_config('[approvals]\nautonomous_risks = "READ"\n'))
    assert message == ('config.toml: approvals.autonomous_risks: should be a list in '
                       'brackets, e.g. ["READ"], got \'READ\'')
    # A list of tables (a recipe's steps) gets no bracketed string to copy.
    message = config_error(write_config('[[recipes]]\nname = "r"\nmatch = "x"\nsteps = "z"\n'))
    assert message == "config.toml: recipes[0].steps: should be a list in brackets, got 'z'"


def test_unknown_section_suggests_the_right_one(write_config: WriteConfig) -> None:
    """A misspelt section name is reported as an unknown section with a suggestion."""
    message = config_error(write_config('[slak]\nbot_token = "x"\n'))
    assert message == "config.toml: slak: unknown section (did you mean 'slack'?)"


def test_unknown_key_in_table_array_suggests(write_config: WriteConfig) -> None:
    """Suggestions also work inside [[array]] tables, with the index in the path."""
    text = '[[schedules]]\nname = "a"\nevery = "1h"\ngoal = "g"\ntimezon = "UTC"\n'
    message = config_error(write_config(text))
    assert message == "config.toml: schedules[0].timezon: unknown key (did you mean 'timezone'?)"


def test_each_problem_on_its_own_line(write_config: WriteConfig) -> None:
    """Several problems give one line each."""
    text = '[daemon]\nport = 0\n[approvals]\nmode = "sometimes"\n'
    lines = config_error(write_config(text)).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("config.toml: daemon.port: ")
    assert lines[1].startswith("config.toml: approvals.mode: ")
    assert "'manual', 'smart' or 'off'" in lines[1]


def test_secrets_are_not_echoed(write_config: WriteConfig) -> None:
    """A wrongly typed secret is reported without its value."""
    message = config_error(write_config("[email]\npassword = 987654321\n"))
    assert message.startswith("config.toml: email.password: ")
    assert "987654321" not in message


def test_email_from_alias(write_config: WriteConfig) -> None:
    """[email] from is read into the sender field."""
    s = load_settings(write_config('[email]\nfrom = "bot@example.com"\nport = 587\n'))
    assert s.email.sender == "bot@example.com" and s.email.port == 587


# ------------------------------------------------------------------ approvals


def test_invalid_approver_format(write_config: WriteConfig) -> None:
    """Approvers must be slack:<id> or telegram:<numeric id>; the key and index are named."""
    message = config_error(write_config('[approvals]\napprovers = ["slack:U1", "alice"]\n'))
    assert message.startswith("config.toml: approvals.approvers[1]: invalid approver 'alice'")


def test_telegram_approver_needs_numeric_id(write_config: WriteConfig) -> None:
    """telegram:@name is refused because Telegram decisions carry numeric user ids."""
    message = config_error(write_config('[approvals]\napprovers = ["telegram:@bob"]\n'))
    assert "approvals.approvers[0]: invalid approver" in message


def test_scopes_without_deny(write_config: WriteConfig) -> None:
    """A scopes entry that leaves out deny is an error naming the risk class."""
    message = config_error(write_config('[approvals.scopes]\nsend = ["once"]\n'))
    assert message == "config.toml: approvals.scopes.SEND: 'deny' must always be offered"


def test_scopes_for_uses_configuration_and_defaults(write_config: WriteConfig) -> None:
    """Configured risk classes get their scopes in canonical order; others keep all four."""
    path = write_config('[approvals.scopes]\ndestructive = ["deny", "once"]\n')
    approvals = load_settings(path).approvals
    assert approvals.scopes_for(RiskClass.DESTRUCTIVE) == [Scope.ONCE, Scope.DENY]
    assert approvals.scopes_for(RiskClass.SEND) == list(Scope)
    assert approvals.scopes_for(RiskClass.READ) == list(Scope)


def test_autonomous_risks_are_case_insensitive(write_config: WriteConfig) -> None:
    """Risk class names are accepted in any case; unknown ones are errors."""
    s = load_settings(write_config('[approvals]\nautonomous_risks = ["read"]\n'))
    assert s.approvals.autonomous_risks == [RiskClass.READ]
    message = config_error(write_config('[approvals]\nautonomous_risks = ["harmless"]\n'))
    assert message.startswith("config.toml: approvals.autonomous_risks[0]: unknown risk class")


# ------------------------------------------------------------------ schedules


def schedule(extra: str) -> str:
    """A [[schedules]] table with a name, a goal and ``extra`` lines."""
    return f'[[schedules]]\nname = "s"\ngoal = "do it"\n{extra}\n'


def test_cron_with_wrong_field_count(write_config: WriteConfig) -> None:
    """A cron line without exactly five fields is an error naming schedules[i].cron."""
    message = config_error(write_config(schedule('cron = "0 9 * *"')))
    assert message == (
        "config.toml: schedules[0].cron: expected 5 fields (minute hour day month weekday), got 4"
    )


def test_cron_with_bad_weekday(write_config: WriteConfig) -> None:
    """Weekday 8 is out of crontab's 0-7 range."""
    message = config_error(write_config(schedule('cron = "0 9 * * 8"')))
    assert message.startswith("config.toml: schedules[0].cron: invalid weekday '8'")


def test_cron_with_bad_minute(write_config: WriteConfig) -> None:
    """Other fields are checked by APScheduler's parser and the field is named."""
    message = config_error(write_config(schedule('cron = "61 * * * *"')))
    assert message.startswith("config.toml: schedules[0].cron: invalid minute field '61'")


@pytest.mark.parametrize(
    "cron", ["*/15 * * * *", "0 9 * * mon-fri", "0 6 * * 0,7", "0 0 1 jan *", "30 8 1-15 * 1-5/2"]
)
def test_valid_crons_load(write_config: WriteConfig, cron: str) -> None:
    """Usual crontab lines, weekday names and Sunday as 0 or 7 are accepted."""
    s = load_settings(write_config(schedule(f'cron = "{cron}"')))
    assert s.schedules[0].cron == cron and s.schedules[0].every is None


def test_schedule_needs_exactly_one_trigger(write_config: WriteConfig) -> None:
    """Both cron and every, or neither, is an error on the schedule."""
    both = config_error(write_config(schedule('cron = "* * * * *"\nevery = "1m"')))
    assert both == "config.toml: schedules[0]: set exactly one of 'cron' or 'every'"
    assert "exactly one" in config_error(write_config(schedule("")))


def test_unknown_timezone(write_config: WriteConfig) -> None:
    """A timezone that zoneinfo does not know is an error naming the key."""
    message = config_error(write_config(schedule('every = "1h"\ntimezone = "Mars/Olympus"')))
    assert message.startswith("config.toml: schedules[0].timezone: unknown timezone 'Mars/Olympus'")


def test_schedule_fields(write_config: WriteConfig) -> None:
    """A full schedule keeps grants as tables and parses its durations."""
    text = schedule(
        'every = "15m"\ntimezone = "Europe/Berlin"\ncron_mode = "ask"\njitter = "0s"\n'
        'grants = [{tool = "send_email", to = ["ops@example.com"]}]\napprovers = ["telegram:42"]'
    )
    sched = load_settings(write_config(text)).schedules[0]
    assert sched.every == timedelta(minutes=15) and sched.cron_mode is CronMode.ASK
    assert sched.jitter == timedelta() and sched.misfire_grace == timedelta(minutes=5)
    assert sched.grants == [{"tool": "send_email", "to": ["ops@example.com"]}]


def test_grant_needs_a_tool(write_config: WriteConfig) -> None:
    """A grant table without tool is an error naming the grant."""
    message = config_error(write_config(schedule('every = "1h"\ngrants = [{to = "x@y.z"}]')))
    assert message.startswith("config.toml: schedules[0].grants[0]: a grant needs 'tool'")


def test_duplicate_schedule_names(write_config: WriteConfig) -> None:
    """Schedule names are unique: the second one is named."""
    text = schedule('every = "1h"') + schedule('every = "2h"')
    message = config_error(write_config(text))
    assert message == "config.toml: schedules[1].name: duplicate schedule name 's'"


# ------------------------------------------------------------------ on-call


def test_rotation_with_no_members(write_config: WriteConfig) -> None:
    """A rotation with an empty member list is an error."""
    message = config_error(write_config('[[oncall.rotations]]\nname = "p"\nmembers = []\n'))
    assert message == "config.toml: oncall.rotations[0].members: rotation has no members"


def test_rotation_fields_and_handoff(write_config: WriteConfig) -> None:
    """Rotation defaults, the parsed handoff and escalation to another rotation."""
    text = (
        '[[oncall.rotations]]\nname = "p"\nmembers = ["slack:U1"]\nhandoff = "Wed 18:30"\n'
        'escalate_after = "10m"\nnext = "s"\n'
        '[[oncall.rotations]]\nname = "s"\nmembers = ["telegram:7"]\n'
        '[[oncall.overrides]]\nwho = "slack:U2"\nfrom = 2026-03-01T09:00:00\n'
        "until = 2026-03-02T09:00:00+01:00\n"
    )
    oncall = load_settings(write_config(text)).oncall
    first = oncall.rotations[0]
    assert first.period == timedelta(weeks=1) and first.start == date(2026, 1, 5)
    handoff = first.to_runtime()  # parsed once, into the value on-call routing reads
    assert (handoff.handoff_weekday, handoff.handoff_time) == (2, time(18, 30))
    assert first.escalate_after == timedelta(minutes=10) and first.next == "s"
    assert oncall.overrides[0].start == datetime(2026, 3, 1, 9, tzinfo=UTC)


def test_rotation_next_must_exist(write_config: WriteConfig) -> None:
    """next must name another configured rotation."""
    text = '[[oncall.rotations]]\nname = "p"\nmembers = ["slack:U1"]\nnext = "ghost"\n'
    message = config_error(write_config(text))
    assert message.startswith("config.toml: oncall.rotations[0].next: no other rotation")


def test_override_must_end_after_it_starts(write_config: WriteConfig) -> None:
    """An override whose until is not after from is an error naming until."""
    text = (
        '[[oncall.overrides]]\nwho = "slack:U1"\nfrom = 2026-03-02T00:00:00Z\n'
        "until = 2026-03-01T00:00:00Z\n"
    )
    message = config_error(write_config(text))
    assert message == "config.toml: oncall.overrides[0].until: must be later than 'from'"


def test_bad_handoff(write_config: WriteConfig) -> None:
    """A handoff that is not '<weekday> HH:MM' is an error."""
    text = '[[oncall.rotations]]\nname = "p"\nmembers = ["slack:U1"]\nhandoff = "monday 9am"\n'
    assert "oncall.rotations[0].handoff: invalid handoff" in config_error(write_config(text))


# ------------------------------------------------------------------ chat and notify


def test_notify_for_unconfigured_platform(write_config: WriteConfig) -> None:
    """A notify channel on a platform without its section is an error naming the key."""
    message = config_error(write_config('[[notify]]\nchannel = "slack:C123"\n'))
    assert message == (
        "config.toml: notify[0].channel: slack is not configured (add a [slack] section)"
    )


def test_notify_with_configured_platform(write_config: WriteConfig) -> None:
    """With [slack] configured a notify entry loads with the default events."""
    s = load_settings(write_config(SLACK + '[[notify]]\nchannel = "slack:C123"\n'))
    assert (s.notify[0].platform, s.notify[0].target) == ("slack", "C123")
    assert NotifyEvent.WAITING_APPROVAL in s.notify[0].events


def test_notify_channel_needs_a_platform_prefix(write_config: WriteConfig) -> None:
    """A channel without slack: or telegram: is an error."""
    message = config_error(write_config('[[notify]]\nchannel = "email:ops"\n'))
    assert message.startswith("config.toml: notify[0].channel: invalid channel 'email:ops'")


def test_slack_socket_mode_needs_app_token(write_config: WriteConfig) -> None:
    """Socket mode without app_token is an error naming slack.app_token."""
    message = config_error(write_config('[slack]\nbot_token = "xoxb-1"\nchannel = "C1"\n'))
    assert message.startswith("config.toml: slack.app_token: required in socket mode")


def test_slack_app_token_prefix(write_config: WriteConfig) -> None:
    """An app token that does not start with xapp- is refused (without echoing it)."""
    text = '[slack]\nbot_token = "xoxb-1"\napp_token = "xoxb-oops"\nchannel = "C1"\n'
    message = config_error(write_config(text))
    assert message.startswith("config.toml: slack.app_token: must be an app-level token")
    assert "xoxb-oops" not in message


def test_slack_http_mode(write_config: WriteConfig) -> None:
    """HTTP mode needs signing_secret instead of app_token; api_url gets its slash."""
    base = '[slack]\nmode = "http"\nbot_token = "xoxb-1"\nchannel = "C1"\n'
    assert "slack.signing_secret: required" in config_error(write_config(base))
    path = write_config(base + 'signing_secret = "s"\napi_url = "http://127.0.0.1:9/api"\n')
    slack = load_settings(path).slack
    assert slack is not None and slack.mode is SlackMode.HTTP
    assert slack.api_url == "http://127.0.0.1:9/api/"


def test_telegram_chat_id_and_webhook(write_config: WriteConfig) -> None:
    """chat_id may be an int (stored as str); webhook mode needs webhook_secret."""
    text = '[telegram]\nbot_token = "1:A"\nchat_id = -100123\n'
    telegram = load_settings(write_config(text)).telegram
    assert telegram is not None and telegram.chat_id == "-100123"
    message = config_error(write_config(text + 'mode = "webhook"\n'))
    assert message.startswith("config.toml: telegram.webhook_secret: required in webhook mode")


# ------------------------------------------------------------------ planner, recipes


def test_openai_planner_needs_url_and_model(write_config: WriteConfig) -> None:
    """kind = openai without base_url is an error naming planner.base_url."""
    message = config_error(write_config('[planner]\nkind = "openai"\nmodel = "m"\n'))
    assert message.startswith("config.toml: planner.base_url: required")


def test_openai_planner_defaults_to_agent_mode_with_its_limits(
        write_config: WriteConfig) -> None:
    """kind = openai works as an agent unless mode = "plan"; limits and on_deny default."""
    base = '[planner]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
    planner = load_settings(write_config(base)).planner
    assert planner.agent and (planner.max_turns, planner.max_actions) == (20, 50)
    assert planner.on_deny.value == "tell_model" and planner.system_prompt == ""
    assert not load_settings(write_config(base + 'mode = "plan"\n')).planner.agent
    assert not load_settings(write_config("")).planner.agent  # rules planner


def test_bad_agent_settings_name_the_key(write_config: WriteConfig) -> None:
    """A wrong mode, on_deny or limit is an error naming planner.<key>."""
    base = '[planner]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
    for line, key in (('mode = "chat"', "planner.mode"), ('on_deny = "ignore"', "planner.on_deny"),
                      ("max_turns = 0", "planner.max_turns"),
                      ("max_actions = -1", "planner.max_actions")):
        message = config_error(write_config(base + line + "\n"))
        assert message.startswith(f"config.toml: {key}: "), message


def test_recipe_with_bad_regex(write_config: WriteConfig) -> None:
    """A recipe match that does not compile is an error naming recipes[i].match."""
    text = '[[recipes]]\nname = "r"\nmatch = "(unclosed"\nsteps = [{tool = "read_file"}]\n'
    message = config_error(write_config(text))
    assert message.startswith("config.toml: recipes[0].match: invalid regular expression")


def test_budgets_must_be_positive(write_config: WriteConfig) -> None:
    """A budget of zero is an error; dotted capability names are quoted in the path."""
    message = config_error(write_config('[policy.budgets]\n"email.send" = 0\n'))
    assert message.startswith('config.toml: policy.budgets."email.send": ')


# ------------------------------------------------------------------ database, work dir


def test_default_database_is_sqlite_in_the_state_dir_beside_the_work_dir(
        tmp_path: Path) -> None:
    """No database: an absolute sqlite URL for signoff.db in ``signoff-state`` beside the
    (overridable) work dir, never inside it."""
    s = Settings.default()
    expected = (Path.cwd() / "signoff-state" / "signoff.db").resolve()
    assert s.database_url() == f"sqlite:///{expected}"
    work = tmp_path / "work"
    state = tmp_path.resolve() / "signoff-state"
    assert s.database_url(work) == f"sqlite:///{state / 'signoff.db'}"
    assert s.resolved_work_dir(work) == work.resolve()
    assert s.resolved_state_dir(work) == state


def test_state_dir_inside_the_work_dir_is_a_config_error(write_config: WriteConfig,
                                                         tmp_path: Path) -> None:
    """A state dir inside (or equal to) the work dir is refused, naming both paths; so is
    a --work-dir that puts the configured state dir inside it."""
    for state in ("work/state", "work"):
        message = config_error(write_config(
            f'[daemon]\nwork_dir = "work"\nstate_dir = "{state}"\n'))
        assert message.startswith("config.toml: daemon.state_dir: the state dir ")
        assert str(tmp_path.resolve() / state) in message
        assert f"inside the work dir {tmp_path.resolve() / 'work'}" in message
    s = load_settings(write_config('[daemon]\nwork_dir = "w"\nstate_dir = "/srv/s/st"\n'))
    with pytest.raises(ConfigError, match="the state dir /srv/s/st is inside the work dir"):
        s.resolved_state_dir(Path("/srv/s"))


def test_relative_sqlite_path_resolves_against_cwd(
    write_config: WriteConfig, tmp_path: Path
) -> None:
    """A relative sqlite:/// path is taken from the current directory, not the file's."""
    sub = tmp_path / "conf"
    sub.mkdir()
    path = sub / "config.toml"
    path.write_text('[daemon]\ndatabase = "sqlite:///data/x.db"\n', encoding="utf-8")
    # write_config made tmp_path the current directory; the file lives in tmp_path/conf.
    assert load_settings(path).database_url() == f"sqlite:///{tmp_path.resolve()}/data/x.db"


@pytest.mark.parametrize(
    "url",
    ["sqlite:////var/lib/signoff.db", "sqlite:///:memory:", "postgresql+psycopg://u:p@h/db"],
)
def test_other_database_urls_unchanged(write_config: WriteConfig, url: str) -> None:
    """Absolute sqlite paths, in-memory sqlite and PostgreSQL URLs are used as given."""
    s = load_settings(write_config(f'[daemon]\ndatabase = "{url}"\n'))
    assert s.database_url() == url


def test_unsupported_database_url(write_config: WriteConfig) -> None:
    """A database URL that is neither sqlite nor postgresql is an error."""
    message = config_error(write_config('[daemon]\ndatabase = "mysql://x/y"\n'))
    assert message.startswith("config.toml: daemon.database: expected an SQLAlchemy URL")


# ------------------------------------------------------------------ check_config


def test_check_config_summary(write_config: WriteConfig) -> None:
    """check_config summarises the file and hides database passwords."""
    text = (
        '[daemon]\nport = 9000\ndatabase = "postgresql+psycopg://u:hunter2@db/s"\n'
        + SLACK
        + schedule('every = "1h"')
    )
    summary = check_config(write_config(text))
    assert "config.toml: OK" in summary
    assert "127.0.0.1:9000" in summary and "slack (socket)" in summary
    assert "schedules: 1" in summary and "rotations: 0" in summary
    assert "hunter2" not in summary and "://•••@db" in summary


def test_check_config_raises_on_errors(write_config: WriteConfig) -> None:
    """check_config raises the same ConfigError as load_settings."""
    with pytest.raises(ConfigError, match=r"approvals\.timeout"):
        check_config(write_config('[approvals]\ntimeout = "soon"\n'))


# ------------------------------------------------------------------ people


PEOPLE = """
[[people]]
name = "alice"
accounts = ["slack:U1", "telegram:42", "web:alice", "email:alice@example.com"]

[[people]]
name = "bob"
accounts = ["web:bob", "slack:U1"]
"""


def test_an_account_under_two_people_names_both(write_config: WriteConfig) -> None:
    """One account listed under two people is refused, naming the account and both."""
    message = config_error(write_config(PEOPLE))
    assert message == ("config.toml: people[1].accounts[1]: account 'slack:U1' is listed "
                       "under both 'alice' and 'bob'")


def test_people_link_accounts_to_one_name(write_config: WriteConfig) -> None:
    """Each listed account is its person; an unlisted actor is nobody else."""
    people = load_settings(write_config(PEOPLE.replace(', "slack:U1"]', "]"))).who_is_who
    assert people.same("slack:U1", "web:alice") and people.name("telegram:42") == "alice"
    assert not people.same("web:alice", "web:bob") and people.name("web:eve") == "web:eve"


def test_a_malformed_account_is_named(write_config: WriteConfig) -> None:
    """An account that is no actor key is refused with the forms expected."""
    message = config_error(write_config('[[people]]\nname = "a"\naccounts = ["alice"]\n'))
    assert message.startswith("config.toml: people[0].accounts[0]: invalid account 'alice'")
    assert "'web:<API key name>'" in message


@pytest.mark.parametrize("entry", ["*", "proxy.example.com", "10.0.0.300"])
def test_trusted_proxies_must_be_addresses(write_config: WriteConfig, entry: str) -> None:
    """daemon.trusted_proxies takes IP addresses and networks only, naming a bad entry
    ("*" too: believing every peer's forwarded address is what the setting keeps closed)."""
    message = config_error(write_config(f'[daemon]\ntrusted_proxies = ["{entry}"]\n'))
    assert "daemon.trusted_proxies" in message and repr(entry) in message
    good = write_config('[daemon]\ntrusted_proxies = ["127.0.0.1", "10.0.0.0/8", "::1"]\n')
    assert load_settings(good).daemon.trusted_proxies == ["127.0.0.1", "10.0.0.0/8", "::1"]


@pytest.mark.parametrize("command", ["git status", "make -n", "./report.sh",
                                     "python3.11 -m json.tool x", "/usr/bin/npm ls",
                                     # their config's plugins, init-hook, eslint.config.js
                                     "mypy .", "pylint src", "eslint ."])
def test_read_only_commands_refuse_programs_that_run_the_work_dirs_code(
        write_config: WriteConfig, command: str) -> None:
    """A command that runs what the work dir tells it to (git's core.fsmonitor, a
    Makefile, a script) may not be read-only: the config names it and says why."""
    message = config_error(write_config(f"[policy]\nread_only_commands = [{command!r}]\n"))
    assert "policy.read_only_commands" in message and repr(command) in message
    assert "unattended" in message

