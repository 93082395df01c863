package router.rules;

import router.contract.Contract;

/**
 * The fate of one message, as {@code streaming.rules.model.Decision}: the outcome and where to,
 * the steps that led to it, and what it asks or keeps. Fields left null do not apply.
 */
public final class Decision {
  public static final String DELIVER = Contract.OUTCOME_DELIVER;
  public static final String SEND = Contract.OUTCOME_SEND;
  public static final String FORWARD = Contract.OUTCOME_FORWARD;
  public static final String DELAYED = Contract.OUTCOME_DELAYED;
  static final String DROPPED = Contract.OUTCOME_DROPPED;
  static final String DISCARDED = Contract.OUTCOME_DISCARDED;

  String outcome;
  String database;
  String address;
  String route;
  String matchStep;
  String choiceStep;
  String reason;
  /** M4, B3: the service a MissingRoute request is made for. */
  String requests;
  /** F3: the hop budget a forwarded copy carries. */
  Integer hopsRemaining;
  /** The routing table the decision was taken in (S1-S3; msdb for what came from outside). */
  String scope;
  /** K2: the identity of the route chosen in the message's own table, for a message that keeps it. */
  Route.Identity remembered;

  Decision(String outcome, String scope) {
    this.outcome = outcome;
    this.scope = scope;
  }

  public String outcome() {
    return outcome;
  }

  public String database() {
    return database;
  }

  public String address() {
    return address;
  }

  public String route() {
    return route;
  }

  public String matchStep() {
    return matchStep;
  }

  public String choiceStep() {
    return choiceStep;
  }

  public String reason() {
    return reason;
  }

  /** M4, B3: the service a MissingRoute request is made for, or null. */
  public String requests() {
    return requests;
  }

  /** F3: the hop budget a forwarded copy carries, or null. */
  public Integer hopsRemaining() {
    return hopsRemaining;
  }

  public String scope() {
    return scope;
  }

  /** K2: the identity this decision keeps for the message's conversation, or null. */
  public Route.Identity remembered() {
    return remembered;
  }
}
