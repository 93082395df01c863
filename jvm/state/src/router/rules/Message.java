package router.rules;

/** A message as the rules read it, as {@code streaming.rules.model.Message} (K1). */
public final class Message {
  static final String REMOTE = "remote";

  final String conversationId;
  final String service;
  /** The sending database, or {@code remote} for a message from another instance (S3). */
  final String origin;
  /** The target broker instance (canonical), or null. */
  final String brokerInstance;
  final boolean fromTarget;
  final int hopsRemaining;
  /** F3: seconds left to live, or null when unknown. */
  final Double timeToLiveS;
  final long sizeBytes;

  public Message(
      String conversationId,
      String service,
      String origin,
      String brokerInstance,
      boolean fromTarget,
      int hopsRemaining,
      Double timeToLiveS,
      long sizeBytes) {
    this.conversationId = conversationId;
    this.service = service;
    this.origin = origin;
    this.brokerInstance = brokerInstance;
    this.fromTarget = fromTarget;
    this.hopsRemaining = hopsRemaining;
    this.timeToLiveS = timeToLiveS;
    this.sizeBytes = sizeBytes;
  }

  boolean isRemote() {
    return REMOTE.equals(origin);
  }

  /** K2: an initiator of this instance with no broker instance (not pinned) keeps its choice. */
  boolean remembersChoice() {
    return !isRemote() && !fromTarget && brokerInstance == null;
  }

  /** S5: the message as if it had arrived from outside. */
  Message asIncoming() {
    return new Message(
        conversationId, service, REMOTE, brokerInstance, fromTarget, hopsRemaining, timeToLiveS, sizeBytes);
  }

  /**
   * F3: the seconds a message has left to live at {@code nowMs}, from when it expires ({@code
   * expiresMs}) or, without that, how long it lives ({@code ttlMs}); null when it has neither.
   */
  public static Double remainingS(Number expiresMs, Number ttlMs, long nowMs) {
    if (expiresMs != null) {
      return (expiresMs.longValue() - nowMs) / 1000.0;
    }
    return ttlMs == null ? null : ttlMs.longValue() / 1000.0;
  }
}
