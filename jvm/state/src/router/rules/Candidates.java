package router.rules;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A candidate set as the choice step reads it (docs/rules.md §1.5): deduplicated (C0), in
 * identity order (the order C5 picks from), split into the tiers C1-C4. Made once per matching key
 * when the snapshot is built, so a message only picks.
 */
final class Candidates implements Serializable {
  private static final long serialVersionUID = 1L;

  /** C1: routes with a mirror address (MI1). */
  final List<Route> mirror = new ArrayList<>();
  /** C2: LOCAL routes; each is usable only where §1.6 locates the service with it. */
  final List<Route> local = new ArrayList<>();
  /** C3: network routes without a mirror address. */
  final List<Route> network = new ArrayList<>();
  /** C4: TRANSPORT routes; usable only for a service name that begins with an address (T1). */
  final List<Route> transport = new ArrayList<>();
  /** A LOCAL route is among the candidates: no usable tier then means {@code service_not_found}. */
  final boolean anyLocal;

  /**
   * C0: routes equal in (broker instance, service, address) count as one, represented by the one
   * with the smallest name; the result is sorted by identity ({@code dedupe_candidates}).
   */
  Candidates(List<Route> routes) {
    // One route, the usual set of a large table (a route per service): nothing to deduplicate or
    // sort. The snapshot is built once per route change, by code the JIT has not compiled yet, so
    // the work per route is what a change costs.
    List<Route> ordered = routes.size() == 1 ? routes : unique(routes);
    boolean anyLocal = false;
    for (Route r : ordered) {
      anyLocal |= r.local;
      if (r.mirrorAddress != null) {
        mirror.add(r);
      } else if (r.local) {
        local.add(r);
      } else if (r.transport) {
        transport.add(r);
      } else {
        network.add(r);
      }
    }
    this.anyLocal = anyLocal;
  }

  /** C0: one route per identity, the one with the smallest name, in identity order. */
  private static List<Route> unique(List<Route> routes) {
    List<Route> byName = new ArrayList<>(routes);
    byName.sort(Comparator.comparing((Route r) -> r.name == null ? "" : r.name, Text.CODE_POINT_ORDER));
    Map<Route.Identity, Route> unique = new LinkedHashMap<>();
    for (Route r : byName) {
      unique.putIfAbsent(r.identity, r);
    }
    List<Route> ordered = new ArrayList<>(unique.values());
    ordered.sort(Comparator.comparing((Route r) -> r.identity));
    return ordered;
  }

  static Candidates of(Route only) {
    return new Candidates(Collections.singletonList(only));
  }

  /** C5: some tier has more than one route to pick from. */
  boolean spreads() {
    return mirror.size() > 1 || local.size() > 1 || network.size() > 1 || transport.size() > 1;
  }

  boolean isEmpty() {
    return mirror.isEmpty() && local.isEmpty() && network.isEmpty() && transport.isEmpty();
  }
}
