--
-- PostgreSQL database dump
--

\restrict 8lBfyoLjktQQryGmoGiPegCub8c0BSXgQhNDKteIE7RUbfHzsUrE6lGVMUo4fzD

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: __SCHEMA__; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA __SCHEMA__;


--
-- Name: events_append_only(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.events_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END
$$;


--
-- Name: events_counted(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.events_counted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    VALUES ('event:' || NEW.kind || ':' || NEW.from_state || ':' || NEW.to_state || ':' || NEW.reason, 1);
    RETURN NULL;
END
$$;


--
-- Name: leasehold_active(text); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.leasehold_active(state text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN state IN ('queued', 'running', 'waiting_for_approval') THEN 1 ELSE 0 END
$$;


--
-- Name: leasehold_bucket(bigint); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.leasehold_bucket(ms bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN ms <= 10 THEN 0 WHEN ms <= 50 THEN 1 WHEN ms <= 100 THEN 2
        WHEN ms <= 250 THEN 3 WHEN ms <= 500 THEN 4 WHEN ms <= 1000 THEN 5
        WHEN ms <= 2500 THEN 6 WHEN ms <= 5000 THEN 7 WHEN ms <= 10000 THEN 8
        WHEN ms <= 30000 THEN 9 WHEN ms <= 60000 THEN 10 WHEN ms <= 300000 THEN 11
        WHEN ms <= 1800000 THEN 12 ELSE 13 END
$$;


--
-- Name: tasks_inserted(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.tasks_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || NEW.state, 1);
    UPDATE users SET active = active + leasehold_active(NEW.state) WHERE user_id = NEW.user_id;
    RETURN NULL;
END
$$;


--
-- Name: tasks_moved(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.tasks_moved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    ms BIGINT;
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || OLD.state, -1), ('state:' || NEW.state, 1);
    UPDATE users
    SET running = running + (CASE WHEN NEW.state = 'running' THEN 1 ELSE 0 END)
                          - (CASE WHEN OLD.state = 'running' THEN 1 ELSE 0 END),
        active = active + leasehold_active(NEW.state) - leasehold_active(OLD.state)
    WHERE user_id = NEW.user_id;
    IF OLD.state = 'queued' AND NEW.state = 'running' THEN
        ms := GREATEST(0, NEW.claimed_at - GREATEST(NEW.queued_at, NEW.run_at));
        INSERT INTO tally_deltas (name, n, sum_ms) VALUES ('queue_wait:' || leasehold_bucket(ms), 1, ms);
    END IF;
    IF OLD.state = 'running' THEN
        ms := GREATEST(0, NEW.updated_at - OLD.claimed_at);
        INSERT INTO tally_deltas (name, n, sum_ms) VALUES ('run_time:' || leasehold_bucket(ms), 1, ms);
    END IF;
    RETURN NULL;
END
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: effects; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.effects (
    op_id text NOT NULL,
    task_id text NOT NULL,
    step bigint NOT NULL,
    intent_fence bigint NOT NULL,
    intent_at bigint NOT NULL,
    receipt_fence bigint DEFAULT 0 NOT NULL,
    receipt_at bigint DEFAULT 0 NOT NULL,
    receipt_by text DEFAULT ''::text NOT NULL,
    result text DEFAULT ''::text NOT NULL
);


--
-- Name: events_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.events_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: events; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.events (
    seq bigint DEFAULT nextval('__SCHEMA__.events_seq'::regclass) NOT NULL,
    task_id text NOT NULL,
    kind text NOT NULL,
    attempt bigint NOT NULL,
    fence bigint NOT NULL,
    op_id text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    reason text NOT NULL,
    actor text NOT NULL,
    at bigint NOT NULL,
    detail text NOT NULL,
    scope text DEFAULT ''::text NOT NULL
);


--
-- Name: schedules; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.schedules (
    id text NOT NULL,
    user_id text NOT NULL,
    payload text NOT NULL,
    cost_budget bigint NOT NULL,
    steps_max bigint NOT NULL,
    priority bigint NOT NULL,
    origin bigint NOT NULL,
    period_ms bigint NOT NULL,
    last_run bigint DEFAULT '-1'::integer NOT NULL,
    created_at bigint NOT NULL,
    CONSTRAINT schedules_period_ms_check CHECK ((period_ms > 0))
);


--
-- Name: schema_migrations; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.schema_migrations (
    version bigint NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at bigint NOT NULL
);


--
-- Name: settings; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.settings (
    key text NOT NULL,
    value bigint NOT NULL
);


--
-- Name: tally_deltas; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.tally_deltas (
    id bigint NOT NULL,
    name text NOT NULL,
    n bigint NOT NULL,
    sum_ms bigint DEFAULT 0 NOT NULL
);


--
-- Name: tally_deltas_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE __SCHEMA__.tally_deltas ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME __SCHEMA__.tally_deltas_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: tasks_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.tasks_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: tasks; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.tasks (
    seq bigint DEFAULT nextval('__SCHEMA__.tasks_seq'::regclass) NOT NULL,
    id text NOT NULL,
    user_id text NOT NULL,
    idem_key text NOT NULL,
    request_hash text NOT NULL,
    payload text NOT NULL,
    state text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    priority bigint NOT NULL,
    run_at bigint NOT NULL,
    deadline bigint DEFAULT 0 NOT NULL,
    version bigint DEFAULT 0 NOT NULL,
    attempts_charged bigint DEFAULT 0 NOT NULL,
    attempts_max bigint NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    lease_until bigint DEFAULT 0 NOT NULL,
    heartbeat_at bigint DEFAULT 0 NOT NULL,
    claimed_at bigint DEFAULT 0 NOT NULL,
    queued_at bigint NOT NULL,
    cost_budget bigint NOT NULL,
    cost_used bigint DEFAULT 0 NOT NULL,
    steps_max bigint NOT NULL,
    steps_used bigint DEFAULT 0 NOT NULL,
    checkpoint text DEFAULT ''::text NOT NULL,
    cancel_requested bigint DEFAULT 0 NOT NULL,
    cancelled_by text DEFAULT ''::text NOT NULL,
    approved_by text DEFAULT ''::text NOT NULL,
    approval_gate text DEFAULT ''::text NOT NULL,
    approval_version bigint DEFAULT 0 NOT NULL,
    schedule_id text DEFAULT ''::text NOT NULL,
    schedule_run bigint DEFAULT 0 NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    attempts_failed bigint DEFAULT 0 NOT NULL,
    CONSTRAINT tasks_attempts_failed_check CHECK ((attempts_failed >= 0)),
    CONSTRAINT tasks_attempts_max_check CHECK ((attempts_max >= 1)),
    CONSTRAINT tasks_cancel_requested_check CHECK ((cancel_requested = ANY (ARRAY[(0)::bigint, (1)::bigint]))),
    CONSTRAINT tasks_check CHECK (((cost_used >= 0) AND (cost_used <= cost_budget))),
    CONSTRAINT tasks_check1 CHECK (((steps_used >= 0) AND (steps_used <= steps_max))),
    CONSTRAINT tasks_check2 CHECK (((state = 'running'::text) = (owner <> ''::text))),
    CONSTRAINT tasks_check3 CHECK (((state = 'running'::text) = (lease_until <> 0))),
    CONSTRAINT tasks_cost_budget_check CHECK ((cost_budget >= 1)),
    CONSTRAINT tasks_reason_check CHECK ((reason = ANY (ARRAY[''::text, 'budget_exhausted'::text, 'steps_exhausted'::text, 'permanent_error'::text, 'cancelled_by_caller'::text, 'approval_rejected'::text, 'attempts_exhausted'::text, 'uncertain_effect'::text, 'deadline_exceeded'::text, 'operator_resolved'::text]))),
    CONSTRAINT tasks_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting_for_approval'::text, 'needs_review'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT tasks_steps_max_check CHECK ((steps_max >= 1))
);


--
-- Name: users; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.users (
    user_id text NOT NULL,
    running bigint DEFAULT 0 NOT NULL,
    active bigint DEFAULT 0 NOT NULL,
    running_max bigint DEFAULT '-1'::integer NOT NULL,
    depth_max bigint DEFAULT '-1'::integer NOT NULL,
    CONSTRAINT users_active_check CHECK ((active >= 0)),
    CONSTRAINT users_depth_max_check CHECK ((depth_max >= '-1'::integer)),
    CONSTRAINT users_running_check CHECK ((running >= 0)),
    CONSTRAINT users_running_max_check CHECK ((running_max >= '-1'::integer))
);


--
-- Name: user_caps; Type: VIEW; Schema: __SCHEMA__; Owner: -
--

CREATE VIEW __SCHEMA__.user_caps AS
 SELECT users.user_id,
    users.running,
    users.active,
        CASE
            WHEN (users.running_max >= 0) THEN users.running_max
            ELSE ( SELECT settings.value
               FROM __SCHEMA__.settings
              WHERE (settings.key = 'user_running_max'::text))
        END AS running_limit,
        CASE
            WHEN (users.depth_max >= 0) THEN users.depth_max
            ELSE ( SELECT settings.value
               FROM __SCHEMA__.settings
              WHERE (settings.key = 'user_depth_max'::text))
        END AS depth_limit
   FROM __SCHEMA__.users;


--
-- Data for Name: effects; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.effects VALUES ('t_808475f02ee37363.s1', 't_808475f02ee37363', 1, 1, 1767268803000, 1, 1767268803000, '', '{"sent":true}');
INSERT INTO __SCHEMA__.effects VALUES ('t_540d6c3702d41b8c.s0', 't_540d6c3702d41b8c', 0, 1, 1767268809000, 0, 0, '', '');


--
-- Data for Name: events; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.events VALUES (1, 't_808475f02ee37363', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268801000, '', '');
INSERT INTO __SCHEMA__.events VALUES (2, 't_808475f02ee37363', 'claimed', 1, 1, '', 'queued', 'running', '', 'w-old', 1767268802000, '', '');
INSERT INTO __SCHEMA__.events VALUES (3, 't_808475f02ee37363', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268803000, 'step 0 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (4, 't_808475f02ee37363', 'effect_intent', 1, 1, 't_808475f02ee37363.s1', 'running', 'running', '', 'w-old', 1767268803000, '', '');
INSERT INTO __SCHEMA__.events VALUES (5, 't_808475f02ee37363', 'effect_receipt', 1, 1, 't_808475f02ee37363.s1', 'running', 'running', '', 'w-old', 1767268803000, '', '');
INSERT INTO __SCHEMA__.events VALUES (6, 't_808475f02ee37363', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268804000, 'step 1 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (7, 't_808475f02ee37363', 'completed', 1, 1, '', 'running', 'completed', '', 'w-old', 1767268804000, '', '');
INSERT INTO __SCHEMA__.events VALUES (8, 't_6434ff62b4e8edd1', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268805000, '', '');
INSERT INTO __SCHEMA__.events VALUES (9, 't_6434ff62b4e8edd1', 'claimed', 1, 1, '', 'queued', 'running', '', 'w-old', 1767268806000, '', '');
INSERT INTO __SCHEMA__.events VALUES (10, 't_6434ff62b4e8edd1', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268807000, 'step 0 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (11, 't_6434ff62b4e8edd1', 'failed', 1, 1, '', 'running', 'failed', 'permanent_error', 'w-old', 1767268807000, '', '');
INSERT INTO __SCHEMA__.events VALUES (12, 't_540d6c3702d41b8c', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268808000, '', '');
INSERT INTO __SCHEMA__.events VALUES (13, 't_540d6c3702d41b8c', 'claimed', 1, 1, '', 'queued', 'running', '', 'w-old', 1767268809000, '', '');
INSERT INTO __SCHEMA__.events VALUES (14, 't_540d6c3702d41b8c', 'effect_intent', 1, 1, 't_540d6c3702d41b8c.s0', 'running', 'running', '', 'w-old', 1767268809000, '', '');
INSERT INTO __SCHEMA__.events VALUES (15, 't_540d6c3702d41b8c', 'uncertain', 1, 1, '', 'running', 'needs_review', 'uncertain_effect', 'w-old', 1767268809000, 't_540d6c3702d41b8c.s0', '');
INSERT INTO __SCHEMA__.events VALUES (16, 't_395142ca8efaf003', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268810000, '', '');
INSERT INTO __SCHEMA__.events VALUES (17, 't_395142ca8efaf003', 'claimed', 1, 1, '', 'queued', 'running', '', 'w-old', 1767268811000, '', '');
INSERT INTO __SCHEMA__.events VALUES (18, 't_395142ca8efaf003', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268812000, 'step 0 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (19, 't_395142ca8efaf003', 'paused', 1, 1, '', 'running', 'waiting_for_approval', '', 'w-old', 1767268812000, 'gate approve version 1', '');
INSERT INTO __SCHEMA__.events VALUES (20, 't_046b1664f61a205e', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268813000, '', '');
INSERT INTO __SCHEMA__.events VALUES (21, 't_046b1664f61a205e', 'claimed', 1, 1, '', 'queued', 'running', '', 'w-old', 1767268814000, '', '');
INSERT INTO __SCHEMA__.events VALUES (22, 't_046b1664f61a205e', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268815000, 'step 0 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (23, 't_046b1664f61a205e', 'step', 1, 1, '', 'running', 'running', '', 'w-old', 1767268816000, 'step 1 cost 3', '');
INSERT INTO __SCHEMA__.events VALUES (24, 't_14db9121e4c732ea', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268817000, '', '');
INSERT INTO __SCHEMA__.events VALUES (25, 't_14db9121e4c732ea', 'cancelled', 0, 0, '', 'queued', 'cancelled', 'cancelled_by_caller', 'ops', 1767268817000, '', '');
INSERT INTO __SCHEMA__.events VALUES (26, 't_0807a6b4c6fa7404', 'submitted', 0, 0, '', '', 'queued', '', 'ana', 1767268818000, '', '');


--
-- Data for Name: schedules; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.schema_migrations VALUES (1, '0001_init.sql', '2d91203602c3ac18a3b1f5539564051eeae3473910869a7830f086ba8ec052cf', 1767268800000);


--
-- Data for Name: settings; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.settings VALUES ('depth_max', 100000);
INSERT INTO __SCHEMA__.settings VALUES ('user_depth_max', 10000);
INSERT INTO __SCHEMA__.settings VALUES ('user_running_max', 0);
INSERT INTO __SCHEMA__.settings VALUES ('attempts_max', 3);
INSERT INTO __SCHEMA__.settings VALUES ('grant_cost_max', 10000);
INSERT INTO __SCHEMA__.settings VALUES ('grant_steps_max', 1000);
INSERT INTO __SCHEMA__.settings VALUES ('claim_batch_max', 16);


--
-- Data for Name: tally_deltas; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (1, 'state:queued', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (2, 'state:running', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (3, 'state:waiting_for_approval', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (4, 'state:needs_review', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (5, 'state:completed', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (6, 'state:failed', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (7, 'state:cancelled', 0, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (8, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (9, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (10, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (11, 'state:running', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (12, 'queue_wait:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (13, 'event:claimed:queued:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (14, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (15, 'event:effect_intent:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (16, 'event:effect_receipt:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (17, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (18, 'state:running', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (19, 'state:completed', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (20, 'run_time:6', 1, 2000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (21, 'event:completed:running:completed:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (22, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (23, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (24, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (25, 'state:running', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (26, 'queue_wait:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (27, 'event:claimed:queued:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (28, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (29, 'state:running', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (30, 'state:failed', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (31, 'run_time:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (32, 'event:failed:running:failed:permanent_error', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (33, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (34, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (35, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (36, 'state:running', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (37, 'queue_wait:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (38, 'event:claimed:queued:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (39, 'event:effect_intent:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (40, 'state:running', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (41, 'state:needs_review', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (42, 'run_time:0', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (43, 'event:uncertain:running:needs_review:uncertain_effect', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (44, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (45, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (46, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (47, 'state:running', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (48, 'queue_wait:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (49, 'event:claimed:queued:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (50, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (51, 'state:running', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (52, 'state:waiting_for_approval', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (53, 'run_time:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (54, 'event:paused:running:waiting_for_approval:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (55, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (56, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (57, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (58, 'state:running', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (59, 'queue_wait:5', 1, 1000);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (60, 'event:claimed:queued:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (61, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (62, 'event:step:running:running:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (63, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (64, 'event:submitted::queued:', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (65, 'state:queued', -1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (66, 'state:cancelled', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (67, 'event:cancelled:queued:cancelled:cancelled_by_caller', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (68, 'state:queued', 1, 0);
INSERT INTO __SCHEMA__.tally_deltas OVERRIDING SYSTEM VALUE VALUES (69, 'event:submitted::queued:', 1, 0);


--
-- Data for Name: tasks; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.tasks VALUES (1, 't_808475f02ee37363', 'ana', 'done', '99d58e873663dd7a39ec0a1723ff2f961ce10c4eadae772f49a8a641f191087e', '{"job":"done"}', 'completed', '', 0, 1767268801000, 0, 1, 0, 3, '', 0, 1767268802000, 1767268802000, 1767268801000, 100, 6, 5, 2, '{"done":2}', 0, '', '', '', 0, '', 0, '', 1767268801000, 1767268804000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (2, 't_6434ff62b4e8edd1', 'ana', 'failed', '205422930cc13fcbab60514e4cd2074ba6c32f148f16787beb23f0dfee2e6e5c', '{"job":"failed"}', 'failed', 'permanent_error', 0, 1767268805000, 0, 1, 0, 3, '', 0, 1767268806000, 1767268806000, 1767268805000, 100, 3, 5, 1, '{"done":1}', 0, '', '', '', 0, '', 0, 'bad input', 1767268805000, 1767268807000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (3, 't_540d6c3702d41b8c', 'ana', 'review', '142fe5eb3ff8ae5fc48563a01b4ec2eeb6190fd312060d1514f730cd23fe830d', '{"job":"review"}', 'needs_review', 'uncertain_effect', 0, 1767268808000, 0, 1, 0, 3, '', 0, 1767268809000, 1767268809000, 1767268808000, 100, 0, 5, 0, '', 0, '', '', '', 0, '', 0, 'timed out mid-call', 1767268808000, 1767268809000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (4, 't_395142ca8efaf003', 'ana', 'waiting', '7308e9c4a51b75ef1b73778adae1604a8224237f8aeb84dfff41f943e16e0ae7', '{"job":"waiting"}', 'waiting_for_approval', '', 0, 1767268810000, 0, 1, 0, 3, '', 0, 1767268811000, 1767268811000, 1767268810000, 100, 3, 5, 2, '{"done":1}', 0, '', '', 'approve', 1, '', 0, '', 1767268810000, 1767268812000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (5, 't_046b1664f61a205e', 'ana', 'running', '84a7a32593912b64835ad02b1c4f230974966b0afba5e81de8a6eeec5820246a', '{"job":"running"}', 'running', '', 0, 1767268813000, 0, 1, 0, 3, 'w-old', 1767272414000, 1767268814000, 1767268814000, 1767268813000, 100, 6, 5, 2, '{"done":2}', 0, '', '', '', 0, '', 0, '', 1767268813000, 1767268816000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (6, 't_14db9121e4c732ea', 'ana', 'cancelled', '03284402bd9c86281537eb2bfc5765a8643c5b401089709616819b5327f61cae', '{"job":"cancelled"}', 'cancelled', 'cancelled_by_caller', 0, 1767268817000, 0, 0, 0, 3, '', 0, 0, 0, 1767268817000, 100, 0, 5, 0, '', 0, 'ops', '', '', 0, '', 0, '', 1767268817000, 1767268817000, 0);
INSERT INTO __SCHEMA__.tasks VALUES (7, 't_0807a6b4c6fa7404', 'ana', 'queued', '2804dd48eb14341a0ff02aaafdcdaa8447af4647e5dd1cf1a6b2f87154c9c68d', '{"job":"queued"}', 'queued', '', 0, 1767268818000, 0, 0, 0, 3, '', 0, 0, 0, 1767268818000, 100, 0, 5, 0, '', 0, '', '', '', 0, '', 0, '', 1767268818000, 1767268818000, 0);


--
-- Data for Name: users; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.users VALUES ('ana', 1, 3, -1, -1);


--
-- Name: events_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.events_seq', 26, true);


--
-- Name: tally_deltas_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.tally_deltas_id_seq', 69, true);


--
-- Name: tasks_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.tasks_seq', 7, true);


--
-- Name: effects effects_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.effects
    ADD CONSTRAINT effects_pkey PRIMARY KEY (op_id);


--
-- Name: effects effects_task_id_step_key; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.effects
    ADD CONSTRAINT effects_task_id_step_key UNIQUE (task_id, step);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (seq);


--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (key);


--
-- Name: tally_deltas tally_deltas_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tally_deltas
    ADD CONSTRAINT tally_deltas_pkey PRIMARY KEY (id);


--
-- Name: tasks tasks_id_key; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tasks
    ADD CONSTRAINT tasks_id_key UNIQUE (id);


--
-- Name: tasks tasks_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (seq);


--
-- Name: tasks tasks_user_id_idem_key_key; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tasks
    ADD CONSTRAINT tasks_user_id_idem_key_key UNIQUE (user_id, idem_key);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (user_id);


--
-- Name: events_actor; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX events_actor ON __SCHEMA__.events USING btree (actor, seq);


--
-- Name: events_at; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX events_at ON __SCHEMA__.events USING btree (at, seq);


--
-- Name: events_task; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX events_task ON __SCHEMA__.events USING btree (task_id, seq);


--
-- Name: tally_deltas_name; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tally_deltas_name ON __SCHEMA__.tally_deltas USING btree (name);


--
-- Name: tasks_claim_queued; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tasks_claim_queued ON __SCHEMA__.tasks USING btree (priority DESC, run_at, seq) WHERE (state = 'queued'::text);


--
-- Name: tasks_deadline; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tasks_deadline ON __SCHEMA__.tasks USING btree (deadline) WHERE ((deadline <> 0) AND (state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting_for_approval'::text])));


--
-- Name: tasks_lease_running; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tasks_lease_running ON __SCHEMA__.tasks USING btree (lease_until) WHERE (state = 'running'::text);


--
-- Name: tasks_schedule_run; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE UNIQUE INDEX tasks_schedule_run ON __SCHEMA__.tasks USING btree (schedule_id, schedule_run) WHERE (schedule_id <> ''::text);


--
-- Name: tasks_state; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tasks_state ON __SCHEMA__.tasks USING btree (state, seq);


--
-- Name: tasks_user; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX tasks_user ON __SCHEMA__.tasks USING btree (user_id, seq);


--
-- Name: events events_counted; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER events_counted AFTER INSERT ON __SCHEMA__.events FOR EACH ROW EXECUTE FUNCTION __SCHEMA__.events_counted();


--
-- Name: events events_no_update; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER events_no_update BEFORE DELETE OR UPDATE ON __SCHEMA__.events FOR EACH ROW EXECUTE FUNCTION __SCHEMA__.events_append_only();


--
-- Name: tasks tasks_inserted; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER tasks_inserted AFTER INSERT ON __SCHEMA__.tasks FOR EACH ROW EXECUTE FUNCTION __SCHEMA__.tasks_inserted();


--
-- Name: tasks tasks_moved; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER tasks_moved AFTER UPDATE OF state ON __SCHEMA__.tasks FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION __SCHEMA__.tasks_moved();


--
-- Name: effects effects_task_id_fkey; Type: FK CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.effects
    ADD CONSTRAINT effects_task_id_fkey FOREIGN KEY (task_id) REFERENCES __SCHEMA__.tasks(id);


--
-- Name: tasks tasks_user_id_fkey; Type: FK CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tasks
    ADD CONSTRAINT tasks_user_id_fkey FOREIGN KEY (user_id) REFERENCES __SCHEMA__.users(user_id);


--
-- PostgreSQL database dump complete
--

\unrestrict 8lBfyoLjktQQryGmoGiPegCub8c0BSXgQhNDKteIE7RUbfHzsUrE6lGVMUo4fzD

