package router.contract;

/**
 * The words the Python half and the JVM half of the router share: generated from
 * {@code streaming/contract.py} by {@code scripts/contract_java.py}, which says why. Do not edit:
 * change the Python module and run {@code python scripts/contract_java.py}; a unit test
 * ({@code tests/unit/test_contract.py}) fails while this file differs from what it writes.
 */
public final class Contract {
  private Contract() {}

  // Outcome: Where a routing decision sends a message (docs/rules.md §1.7).
  public static final String OUTCOME_DELIVER = "deliver";
  public static final String OUTCOME_SEND = "send";
  public static final String OUTCOME_FORWARD = "forward";
  public static final String OUTCOME_DELAYED = "delayed";
  public static final String OUTCOME_DROPPED = "dropped";
  public static final String OUTCOME_DISCARDED = "discarded";
  /** Every outcome, in the Python enum's order. */
  public static final String[] OUTCOMES = {
    "deliver", "send", "forward", "delayed", "dropped", "discarded"
  };

  // Reason: Why a message was delayed, dropped or discarded (the `reason` header).
  public static final String REASON_NO_ROUTE = "no_route";
  public static final String REASON_ROUTE_REQUESTED = "route_requested";
  public static final String REASON_SERVICE_NOT_FOUND = "service_not_found";
  public static final String REASON_FORWARDING_DISABLED = "forwarding_disabled";
  public static final String REASON_HOPS_EXHAUSTED = "hops_exhausted";
  public static final String REASON_LIFETIME_EXPIRED = "lifetime_expired";
  public static final String REASON_FORWARD_BUFFER_FULL = "forward_buffer_full";
  public static final String REASON_PRINCIPAL_UNKNOWN = "principal_unknown";
  /**
   * Not a rule's: the router could not create or write the destination topic, so the message went
   * to the dropped topic instead (streaming.spark.output).
   */
  public static final String REASON_DESTINATION_UNAVAILABLE = "destination_unavailable";
  /** Every reason, in the Python enum's order. */
  public static final String[] REASONS = {
    "no_route", "route_requested", "service_not_found", "forwarding_disabled", "hops_exhausted",
    "lifetime_expired", "forward_buffer_full", "principal_unknown", "destination_unavailable"
  };

  /**
   * The match_step of a decision: the reply shortcut (S4) or the matching step that ended (M1-M7).
   */
  public static final String[] MATCH_STEPS = {"S4", "M1", "M2", "M3", "M4", "M5", "M6", "M7"};
  public static final String S4 = "S4";
  public static final String M1 = "M1";
  public static final String M2 = "M2";
  public static final String M3 = "M3";
  public static final String M4 = "M4";
  public static final String M5 = "M5";
  public static final String M6 = "M6";
  public static final String M7 = "M7";

  /** The choice_step of a decision: the tier its route was chosen from. */
  public static final String[] CHOICE_STEPS = {"C1", "C2", "C3", "C4"};
  public static final String C1 = "C1";
  public static final String C2 = "C2";
  public static final String C3 = "C3";
  public static final String C4 = "C4";

  /**
   * The headers of a decided message, in order; one whose value is null is left out. due_at (when
   * it falls due, D2) and the kept_* ones (its conversation's kept choice, K2, read back with it)
   * are on delayed messages only.
   */
  public static final String[] MESSAGE_HEADERS = {
    "outcome", "route", "match_step", "choice_step", "reason", "database", "address", "scope",
    "requests", "snapshot_version", "decided_at", "router_instance", "due_at", "kept_bid",
    "kept_route_service", "kept_address"
  };
  public static final String HEADER_OUTCOME = "outcome";
  public static final String HEADER_ROUTE = "route";
  public static final String HEADER_MATCH_STEP = "match_step";
  public static final String HEADER_CHOICE_STEP = "choice_step";
  public static final String HEADER_REASON = "reason";
  public static final String HEADER_DATABASE = "database";
  public static final String HEADER_ADDRESS = "address";
  public static final String HEADER_SCOPE = "scope";
  public static final String HEADER_REQUESTS = "requests";
  public static final String HEADER_SNAPSHOT_VERSION = "snapshot_version";
  public static final String HEADER_DECIDED_AT = "decided_at";
  public static final String HEADER_ROUTER_INSTANCE = "router_instance";
  public static final String HEADER_DUE_AT = "due_at";
  public static final String HEADER_KEPT_BID = "kept_bid";
  public static final String HEADER_KEPT_ROUTE_SERVICE = "kept_route_service";
  public static final String HEADER_KEPT_ADDRESS = "kept_address";

  /**
   * K2: the C0 identity (broker instance or "", service or "", address) a decision keeps, or null.
   */
  public static final String[] CHOICE_IDENTITY_COLUMNS = {"k_bid", "k_route_service", "k_address"};

  /**
   * What the decision adds to a row, in order (router.spark.DecisionPass,
   * streaming.spark.decision).
   */
  public static final String[] DECISION_COLUMNS = {
    "outcome", "d_database", "d_address", "d_route", "match_step", "choice_step", "reason",
    "requests", "d_hops_remaining", "d_scope", "k_bid", "k_route_service", "k_address", "k_change",
    "d_topic", "d_snapshot", "d_decided_at", "d_headers"
  };

  /** The state's key of a row: its conversation endpoint. */
  public static final String STATE_KEY_COLUMN = "c_key";

  /** What a row brings the state: one of STATE_KINDS' values. */
  public static final String STATE_KIND_COLUMN = "c_kind";

  /** A message to decide, a kept choice read back (K2), a delayed message read back (D1). */
  public static final int STATE_KIND_MESSAGE = 0;
  public static final int STATE_KIND_CHOICE = 1;
  public static final int STATE_KIND_DELAYED = 2;

  /** K2: a kept choice's entry, the origin database and the target service. */
  public static final String[] ENTRY_COLUMNS = {"origin", "service"};

  /** The identity a choice row brings the state (K2). */
  public static final String[] STATE_IDENTITY_COLUMNS = {"c_bid", "c_route_service", "c_address"};

  /** The identity the message's conversation kept (K2), set by the state processor, or null. */
  public static final String[] KEPT_COLUMNS = {"kept_bid", "kept_route_service", "kept_address"};

  /** When a choice row's choice was made, or a delayed row's message was delayed. */
  public static final String STATE_AT_COLUMN = "c_at_ms";

  /** A row's place in its batch, which keeps a conversation's order through the state. */
  public static final String POSITION_COLUMN = "pos";

  /** The message id: D1 holds a message once, however many copies of it are read back. */
  public static final String ID_COLUMN = "id";

  /** Set by the state: the message's conversation endpoint has delayed messages waiting (D1). */
  public static final String WAITING_COLUMN = "waiting";

  /** Set by the state: the message is the first of its entry in the batch to choose (K2). */
  public static final String FIRST_COLUMN = "first_of_entry";

  /** The micro-batch's time, the now of every decision in it. */
  public static final String BATCH_TIME_COLUMN = "batch_ms";

  /** The name of the state variable that holds a key's memory (the state data source reads it). */
  public static final String STATE_VARIABLE = "memory";

  /** The last part of each topic of an instance's own ({prefix}.{instance}.{kind}). */
  public static final String[] INSTANCE_TOPIC_KINDS = {
    "outbound", "inbound", "delayed", "choices", "requests", "dropped", "deadletter", "redrives"
  };

  /**
   * The part that names a local service's queue: {prefix}.{instance}.queue.{database}.{service}.
   */
  public static final String QUEUE_PART = "queue";

  /** The part of a network address's topic: {prefix}.-net.{address}. */
  public static final String NETWORK_PART = "-net";

  /** Kafka's longest topic name. */
  public static final int MAX_TOPIC = 249;

  /** The longest escaped part; a longer one is cut and hashed. */
  public static final int MAX_PART = 60;

  /** The longest prefix (see streaming.topics). */
  public static final int MAX_PREFIX = 150;

  /** Hex digits of SHA-256 that end a cut part or a cut name. */
  public static final int HASH_DIGITS = 16;

  /** What separates a cut part's head from its hash. */
  public static final String PART_CUT_MARK = "-h";

  /** What separates a cut topic name's head from its hash. */
  public static final String TOPIC_CUT_MARK = "-t";
}
