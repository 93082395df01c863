package router.rules;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import router.contract.Contract;

/**
 * Service Broker's decision for one message (docs/rules.md §1.7), the JVM rendering of {@code
 * streaming.rules.engine.decide_message}: the same steps in the same order, each named after the
 * Python function it renders, so that a rule is found by its id in either. The Python reference
 * is the rules' one description; this class is held equal to it by the agreement property tests
 * ({@code tests/integration/test_spark_engine.py}) and every scenario of the suite.
 *
 * <p>Where the rules leave a choice arbitrary, this class takes the reference's: the next in turn
 * of a {@link Rotation} over the candidates in identity order (C5) and over the distinct broker
 * instances of M3; L3 tries the origin database first, then catalog order.
 */
final class Engine {
  static final String M1 = Contract.M1;
  static final String M2 = Contract.M2;
  static final String M3 = Contract.M3;
  static final String M4 = Contract.M4;
  static final String M5 = Contract.M5;
  static final String M6 = Contract.M6;
  static final String M7 = Contract.M7;
  static final String S4 = Contract.S4;
  static final String C1 = Contract.C1;
  static final String C2 = Contract.C2;
  static final String C3 = Contract.C3;
  static final String C4 = Contract.C4;

  static final String NO_ROUTE = Contract.REASON_NO_ROUTE;
  static final String ROUTE_REQUESTED = Contract.REASON_ROUTE_REQUESTED;
  static final String SERVICE_NOT_FOUND = Contract.REASON_SERVICE_NOT_FOUND;
  static final String FORWARDING_DISABLED = Contract.REASON_FORWARDING_DISABLED;
  static final String HOPS_EXHAUSTED = Contract.REASON_HOPS_EXHAUSTED;
  static final String LIFETIME_EXPIRED = Contract.REASON_LIFETIME_EXPIRED;
  static final String FORWARD_BUFFER_FULL = Contract.REASON_FORWARD_BUFFER_FULL;
  static final String PRINCIPAL_UNKNOWN = Contract.REASON_PRINCIPAL_UNKNOWN;

  private Engine() {}

  /** The step that ended matching, and its candidates (none for M4 and M7). */
  private static final class Match {
    final String step;
    final Candidates candidates;

    Match(String step, Candidates candidates) {
      this.step = step;
      this.candidates = candidates;
    }
  }

  /** The route chosen and the choice step (tier) that chose it. */
  private static final class Choice {
    final Route route;
    final String step;

    Choice(Route route, String step) {
      this.route = route;
      this.step = step;
    }
  }

  /** S1-S3, {@code routing_scope}: msdb's table for a message from outside, else its database's. */
  static String routingScope(Message m) {
    return m.isRemote() ? Snapshot.MSDB : m.origin;
  }

  /** F5, {@code discarded_for_buffer}: a forward that does not fit the buffer, discarded with its route. */
  static void discardForBuffer(Decision forward) {
    forward.outcome = Decision.DISCARDED;
    forward.reason = FORWARD_BUFFER_FULL;
    forward.address = null;
    forward.hopsRemaining = null;
  }

  /** D1, B7, {@code delayed_behind_conversation}: waits behind its endpoint's delayed message, unmatched. */
  static Decision delayedBehind(Message m) {
    Decision d = new Decision(Decision.DELAYED, routingScope(m));
    d.reason = NO_ROUTE;
    return d;
  }

  /**
   * {@code decide_message}: one message against the snapshot, ignoring the rest of its batch.
   * {@code pending} holds {@code scope\0service} of the requests outstanding (B4); {@code
   * remembered} is what the conversation chose before (K2), counted only for a message that keeps
   * its choice; {@code rotation} says whose turn it is among equal options (C5, M3).
   */
  static Decision decide(
      Message m, Snapshot.Site site, Set<String> pending, Route.Identity remembered, Rotation rotation) {
    if (!m.remembersChoice()) {
      remembered = null;
    }
    Snapshot.Database shortcut = replyShortcut(m, site);
    if (shortcut != null) {
      // S4 consults no routing table: the decision has no scope, as the reference's has none.
      Decision d = new Decision(Decision.DELIVER, null);
      d.database = shortcut.name;
      d.matchStep = S4;
      return d;
    }
    String scope = routingScope(m);
    Match match = matchRoutes(site, site.table(scope), scope, m, pending.contains(scope + "\u0000" + m.service),
        remembered, rotation);
    if (match.step.equals(M4)) {
      Decision d = notRouted(m, scope, match, ROUTE_REQUESTED, null);
      d.requests = m.service;
      return d;
    }
    if (match.step.equals(M7)) {
      return notRouted(m, scope, match, NO_ROUTE, null);
    }
    Choice choice = chooseRoute(match.candidates, m, site, remembered, rotation);
    if (choice == null) {
      return notRouted(m, scope, match, match.candidates.anyLocal ? SERVICE_NOT_FOUND : NO_ROUTE, null);
    }
    Snapshot.Database database = choice.step.equals(C2) ? destinationDatabase(m, choice.route, site) : null;
    Decision decision;
    if (database != null) {
      decision = chosen(m, scope, match, choice, Decision.DELIVER);
      decision.database = database.name;
    } else {
      decision = leaveInstance(m, site, scope, match, choice, pending, rotation);
    }
    if (m.remembersChoice()) {
      decision.remembered = choice.route.identity;
    }
    return decision;
  }

  /** S4, {@code reply_shortcut_database}: an incoming reply to a database of this instance. */
  static Snapshot.Database replyShortcut(Message m, Snapshot.Site site) {
    if (!(m.isRemote() && m.fromTarget && m.brokerInstance != null)) {
      return null;
    }
    return site.byBrokerInstance(m.brokerInstance);
  }

  /** M1-M7, {@code match_routes}: the first matching step that yields a route (§1.4). */
  private static Match matchRoutes(
      Snapshot.Site site,
      Snapshot.Table table,
      String scope,
      Message m,
      boolean requestPending,
      Route.Identity remembered,
      Rotation rotation) {
    Snapshot.Named named = table.named.get(m.service);
    if (named != null) {
      if (m.brokerInstance != null) {
        Candidates m1 = named.byBroker.get(Text.canonicalGuid(m.brokerInstance));
        if (m1 != null) {
          return new Match(M1, m1);
        }
      }
      if (named.noBroker != null) {
        return new Match(M2, named.noBroker);
      }
      if (m.brokerInstance == null && !named.brokers.isEmpty()) {
        String broker = m3Broker(site.key, scope, m.service, named.brokers, remembered, rotation);
        return new Match(M3, named.byBroker.get(broker));
      }
    }
    if (!requestPending && table.hasBcn) {
      return new Match(M4, null);
    }
    if (table.wildcard != null) {
      return new Match(M5, table.wildcard);
    }
    if (m.brokerInstance != null && site.hosts(m.service)) {
      return new Match(M6, Candidates.of(Route.virtualLocal(scope, m.service)));
    }
    return new Match(M7, null);
  }

  /** M3, C5, K2: the broker instance kept while it is among them, else the next in turn. */
  private static String m3Broker(
      String instance,
      String scope,
      String service,
      List<String> brokers,
      Route.Identity remembered,
      Rotation rotation) {
    if (remembered != null && !remembered.brokerInstance.isEmpty()) {
      String kept = Text.canonicalGuid(remembered.brokerInstance);
      if (brokers.contains(kept)) {
        return kept;
      }
    }
    return brokers.get(rotation.take(instance, Rotation.brokersKey(scope, service, brokers), brokers.size()));
  }

  /** C1-C5, {@code choose_route}: the first non-empty tier picks one route, or null. */
  private static Choice chooseRoute(
      Candidates c, Message m, Snapshot.Site site, Route.Identity remembered, Rotation rotation) {
    if (!c.mirror.isEmpty()) {
      return new Choice(pickOne(c.mirror, site.key, remembered, rotation), C1);
    }
    if (!c.local.isEmpty()) {
      List<Route> locatable = new ArrayList<>(c.local.size());
      for (Route r : c.local) {
        if (destinationDatabase(m, r, site) != null) {
          locatable.add(r);
        }
      }
      if (!locatable.isEmpty()) {
        return new Choice(pickOne(locatable, site.key, remembered, rotation), C2);
      }
    }
    if (!c.network.isEmpty()) {
      return new Choice(pickOne(c.network, site.key, remembered, rotation), C3);
    }
    if (!c.transport.isEmpty() && Text.transportAddress(m.service) != null) {
      return new Choice(pickOne(c.transport, site.key, remembered, rotation), C4);
    }
    return null;
  }

  /** C5, K2, {@code pick_one}: the remembered route while it is in the tier, else the next in turn. */
  private static Route pickOne(List<Route> tier, String instance, Route.Identity remembered, Rotation rotation) {
    if (remembered != null) {
      for (Route r : tier) {
        if (r.identity.equals(remembered)) {
          return r;
        }
      }
    }
    return tier.get(rotation.take(instance, Rotation.tierKey(tier), tier.size()));
  }

  /** L1-L4, {@code destination_database}: the conversation's broker instance, else the route's. */
  private static Snapshot.Database destinationDatabase(Message m, Route route, Snapshot.Site site) {
    String broker = m.brokerInstance != null ? m.brokerInstance : route.brokerInstance;
    return site.locate(m.service, broker, m.isRemote() ? null : m.origin);
  }

  /** C-drop, F3, F5, MI2, MI3, T1, S5, {@code leave_instance}: send or forward a non-LOCAL choice. */
  private static Decision leaveInstance(
      Message m,
      Snapshot.Site site,
      String scope,
      Match match,
      Choice choice,
      Set<String> pending,
      Rotation rotation) {
    if (m.isRemote() && !site.forwarding) {
      return notRouted(m, scope, match, FORWARDING_DISABLED, choice);
    }
    if (m.isRemote()) {
      String discard = forwarderDiscardReason(m, site);
      if (discard != null) {
        Decision d = chosen(m, scope, match, choice, Decision.DISCARDED);
        d.reason = discard;
        return d;
      }
    }
    String address = nextHop(m, choice, site);
    if (address == null) {
      return notRouted(m, scope, match, PRINCIPAL_UNKNOWN, choice);
    }
    if (!m.isRemote() && Text.normalizeAddress(address).equals(site.address)) {
      return decide(m.asIncoming(), site, pending, null, rotation);
    }
    if (m.isRemote()) {
      Decision d = chosen(m, scope, match, choice, Decision.FORWARD);
      d.address = address;
      d.hopsRemaining = m.hopsRemaining - 1;
      return d;
    }
    Decision d = chosen(m, scope, match, choice, Decision.SEND);
    d.address = address;
    return d;
  }

  /** F3, F5, {@code forwarder_discard_reason}: hops spent, lifetime over, or larger than the buffer. */
  private static String forwarderDiscardReason(Message m, Snapshot.Site site) {
    if (m.hopsRemaining <= 0) {
      return HOPS_EXHAUSTED;
    }
    if (m.timeToLiveS != null && m.timeToLiveS <= 0) {
      return LIFETIME_EXPIRED;
    }
    if (m.sizeBytes > site.forwardBytes) {
      return FORWARD_BUFFER_FULL;
    }
    return null;
  }

  /** {@code next_hop}: C1 the principal partner (MI2, MI3), C4 the service name's address (T1). */
  private static String nextHop(Message m, Choice choice, Snapshot.Site site) {
    if (choice.step.equals(C1)) {
      return site.principal(choice.route);
    }
    if (choice.step.equals(C4)) {
      return Text.transportAddress(m.service);
    }
    return choice.route.address;
  }

  /** D1, D5, {@code not_routed}: delayed if locally originated, else dropped. */
  private static Decision notRouted(Message m, String scope, Match match, String reason, Choice choice) {
    String outcome = m.isRemote() ? Decision.DROPPED : Decision.DELAYED;
    Decision d;
    if (choice != null) {
      d = chosen(m, scope, match, choice, outcome);
    } else {
      d = new Decision(outcome, scope);
      d.matchStep = match.step;
    }
    d.reason = reason;
    return d;
  }

  /** {@code chosen}: a decision with a chosen route; the virtual M6 route is reported as no route. */
  private static Decision chosen(Message m, String scope, Match match, Choice choice, String outcome) {
    Decision d = new Decision(outcome, scope);
    d.route = match.step.equals(M6) ? null : choice.route.name;
    d.matchStep = match.step;
    d.choiceStep = choice.step;
    return d;
  }
}
