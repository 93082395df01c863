package router.rules;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * C5, M3: new conversations take equal options in turn, round-robin, in the order a pass decides
 * them ({@code streaming.rules.choice.Rotation}). Each set of equal options of an instance (a
 * tier's deduplicated routes, or M3's distinct broker instances of a service) has a counter, the
 * index its next pick takes, keyed by {@link #tierKey} or {@link #brokersKey} as the reference keys
 * it (a set belongs to one routing table). A set of one option has none.
 *
 * <p>Counters come in and go out as {@code instance\0key\0next}: the pass starts from what the driver
 * set ({@code router.spark.DecisionInputs}) and hands back those it advanced.
 */
final class Rotation {
  static final String OPTIONS = "\u001e";
  static final String FIELDS = "\u001f";

  private final Map<String, Integer> next = new HashMap<>();
  private final Map<String, Integer> advanced = new LinkedHashMap<>();

  Rotation(String[] counters) {
    for (String c : counters) {
      int cut = c.lastIndexOf('\u0000');
      next.put(c.substring(0, cut), Integer.parseInt(c.substring(cut + 1)));
    }
  }

  /** The index (of {@code count} options, in their stable order) the next pick of {@code key} takes. */
  int take(String instance, String key, int count) {
    if (count == 1) {
      return 0;
    }
    String at = instance + "\u0000" + key;
    int index = Math.floorMod(next.getOrDefault(at, 0), count);
    int after = (index + 1) % count;
    next.put(at, after);
    advanced.put(at, after);
    return index;
  }

  /** The counters this pass moved, as {@code instance\0key\0next}. */
  List<String> advanced() {
    List<String> out = new ArrayList<>(advanced.size());
    for (Map.Entry<String, Integer> e : advanced.entrySet()) {
      out.add(e.getKey() + "\u0000" + e.getValue());
    }
    return out;
  }

  /** C5: a tier's key: its table, its routes' C0 identities in the order it picks from ({@code tier_key}). */
  static String tierKey(List<Route> tier) {
    StringBuilder key = new StringBuilder("C5").append(OPTIONS).append(tier.get(0).scope);
    for (Route r : tier) {
      Route.Identity i = r.identity;
      key.append(OPTIONS).append(i.brokerInstance).append(FIELDS).append(i.service).append(FIELDS).append(i.address);
    }
    return key.toString();
  }

  /** M3: the key of a service's distinct broker instances in a table, ascending ({@code brokers_key}). */
  static String brokersKey(String scope, String service, List<String> brokers) {
    StringBuilder key = new StringBuilder("M3").append(OPTIONS).append(scope).append(OPTIONS).append(service);
    for (String b : brokers) {
      key.append(OPTIONS).append(b);
    }
    return key.toString();
  }
}
