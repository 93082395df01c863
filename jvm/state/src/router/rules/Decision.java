package router.rules;

/**
 * The fate of one message, as {@code streaming.rules.model.Decision}: the outcome and where to,
 * the steps that led to it, and what it asks or keeps. Fields left null do not apply.
 */
final class Decision {
  static final String DELIVER = "deliver";
  static final String SEND = "send";
  static final String FORWARD = "forward";
  static final String DELAYED = "delayed";
  static final String DROPPED = "dropped";
  static final String DISCARDED = "discarded";

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
}
