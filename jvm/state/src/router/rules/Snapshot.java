package router.rules;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Predicate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import router.naming.TopicNames;

/**
 * The route snapshot a micro-batch is decided against: for each instance a query routes, its
 * catalog, its active routing tables (R6 applied by whoever built the snapshot) grouped by
 * matching key, and its mirror partners' roles. Built once per route snapshot from the JSON that
 * {@code streaming.spark.decision.snapshot_json} writes, and broadcast to the tasks.
 *
 * <p>Per table, routes naming a service are grouped by service: those naming no broker instance
 * (M2) and those naming each broker instance (M1, M3), each a ready {@link Candidates}; the
 * routes naming neither service nor broker instance form the wildcard set (M5). A message then
 * matches with a hash lookup or two, whatever the size of the table.
 */
public final class Snapshot implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String MSDB = "msdb";
  static final String BCN = "SQL/ServiceBroker/BrokerConfiguration";
  static final String PRINCIPAL = "principal";

  private final Map<String, Site> sites;
  /** The topic prefix of the destination topics, or null when the snapshot names none. */
  private final String prefix;
  /** The inbound topic of every instance in the catalogs, by its normalized address. */
  private final Map<String, String> inbound;
  /** Which routes and roles it holds (the routes and mirrors topics' offsets), for the decisions' headers. */
  private final String version;

  /** The JSON it was parsed from: what it travels as ({@link #writeReplace}). */
  private final String json;

  private Snapshot(
      Map<String, Site> sites, String prefix, Map<String, String> inbound, String version, String json) {
    this.sites = sites;
    this.prefix = prefix;
    this.inbound = inbound;
    this.version = version;
    this.json = json;
  }

  /**
   * A snapshot is serialized as its JSON, and parsed again where it is read. Spark serializes a
   * broadcast value once, when it is broadcast, even in local mode, where the tasks then read the
   * value itself: with 100,000 routes, Java's serialization of the parsed maps made the broadcast
   * take 0.7-1.0 s, in the micro-batch that took the route change in, and 0.04-0.2 s as JSON. An
   * executor of a cluster parses it once (0.3-0.8 s for 100,000 routes).
   */
  private Object writeReplace() {
    return new Form(json);
  }

  /** What a {@link Snapshot} is serialized as: its JSON. */
  private static final class Form implements Serializable {
    private static final long serialVersionUID = 1L;
    private final String json;

    Form(String json) {
      this.json = json;
    }

    private Object readResolve() {
      return parse(json);
    }
  }

  /** The instance a row names, or null when the snapshot holds none by that key. */
  public Site site(String instance) {
    return instance == null ? null : sites.get(instance);
  }

  /** Which routes and roles it holds (the routes and mirrors topics' offsets). */
  public String version() {
    return version;
  }

  /** Whether it names the destination topics ({@link #topic}), that is has a topic prefix. */
  public boolean namesTopics() {
    return prefix != null;
  }

  /**
   * The topic a message to {@code service} decided {@code d} at {@code site} goes to, when the
   * snapshot {@link #namesTopics names topics} ({@code streaming.topics}' naming, by {@link
   * TopicNames}): a local service's queue for {@code deliver}, the next hop's inbound or network
   * topic for {@code send} and {@code forward}, the instance's delayed topic, else its dropped topic.
   */
  public String topic(Decision d, Site site, String service) {
    switch (d.outcome) {
      case Decision.DELIVER:
        return TopicNames.queue(site.key, d.database, service, prefix);
      case Decision.SEND:
      case Decision.FORWARD:
        String address = Text.normalizeAddress(d.address);
        String known = inbound.get(address);
        return known != null ? known : TopicNames.network(address, prefix);
      case Decision.DELAYED:
        return site.delayedTopic;
      default:
        return site.droppedTopic;
    }
  }

  /** The snapshot of {@code json} (see the class comment for where it comes from). */
  public static Snapshot parse(String json) {
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("the route snapshot is not valid JSON", e);
    }
    Map<String, Site> sites = new HashMap<>();
    for (JsonNode node : root.get("instances")) {
      Site site = new Site(node);
      sites.put(site.key, site);
    }
    Map<String, String> inbound = new HashMap<>();
    JsonNode topics = root.get("inbound");
    if (topics != null) {
      for (Map.Entry<String, JsonNode> e : topics.properties()) {
        inbound.put(e.getKey(), e.getValue().asText());
      }
    }
    return new Snapshot(sites, text(root, "prefix"), inbound, text(root, "version"), json);
  }

  /** How many active routes the snapshot holds, over every instance. */
  public int routes() {
    int n = 0;
    for (Site s : sites.values()) {
      n += s.routes;
    }
    return n;
  }

  /**
   * C5, M3: some set of equal options has more than one (a tier of a candidate set, or a service's
   * broker instances): a pick then takes its turn in a rotation that runs across conversations.
   */
  public boolean spreads() {
    return anyTable(t -> t.spreads);
  }

  /**
   * B4, C5, M3: a batch must be decided in one pass, in batch order: an active route names the
   * dynamic routing service (B4's first asker is the first in the whole batch), or some set of
   * equal options has more than one ({@link #spreads}: the rotation runs across conversations).
   * {@code streaming.spark.decision.SnapshotFlags.in_one_pass} is this, read when the snapshot is built.
   */
  public boolean inOnePass() {
    return anyTable(t -> t.spreads || t.hasBcn);
  }

  /** Whether a table of some instance is {@code such}. */
  private boolean anyTable(Predicate<Table> such) {
    for (Site s : sites.values()) {
      for (Table t : s.tables.values()) {
        if (such.test(t)) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * A route is an array of these values, in this order ({@code
   * streaming.spark.decision.ROUTE_FIELDS}), not an object: half the JSON of a large table.
   */
  static final String[] ROUTE_FIELDS = {
    "scope", "name", "service", "broker_instance", "address", "mirror_address"
  };

  /** The {@code i}-th value of a route's array ({@link #ROUTE_FIELDS}), or null. */
  private static String item(JsonNode route, int i) {
    return textOf(route.get(i));
  }

  private static String text(JsonNode node, String field) {
    return textOf(node.get(field));
  }

  private static String textOf(JsonNode value) {
    return value == null || value.isNull() ? null : value.asText();
  }

  /** A database of an instance's catalog. */
  static final class Database implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final String brokerInstance;
    final boolean enabled;
    final Set<String> services;

    Database(JsonNode node) {
      this.name = text(node, "name");
      this.brokerInstance = Text.canonicalGuid(text(node, "broker_instance"));
      this.enabled = node.get("broker_enabled").asBoolean();
      Set<String> services = new HashSet<>();
      for (JsonNode s : node.get("services")) {
        services.add(s.asText());
      }
      this.services = services;
    }
  }

  /** The routes of one table naming one service: M2's, and M1's and M3's by broker instance. */
  static final class Named implements Serializable {
    private static final long serialVersionUID = 1L;
    /** M2: naming no broker instance; null when none does. */
    final Candidates noBroker;
    /** M1, M3: by the (canonical) broker instance they name. */
    final Map<String, Candidates> byBroker;
    /** M3: those broker instances, ascending. */
    final List<String> brokers;

    Named(List<Route> routes) {
      List<Route> none = new ArrayList<>();
      Map<String, List<Route>> by = new HashMap<>();
      for (Route r : routes) {
        if (r.brokerInstance == null) {
          none.add(r);
        } else {
          by.computeIfAbsent(r.brokerInstance, k -> new ArrayList<>()).add(r);
        }
      }
      this.noBroker = none.isEmpty() ? null : new Candidates(none);
      if (by.isEmpty()) { // the usual case in a large table: no route of the service names one
        this.byBroker = Collections.emptyMap();
        this.brokers = Collections.emptyList();
        return;
      }
      Map<String, Candidates> byBroker = new HashMap<>();
      TreeSet<String> brokers = new TreeSet<>(Text.CODE_POINT_ORDER);
      for (Map.Entry<String, List<Route>> e : by.entrySet()) {
        byBroker.put(e.getKey(), new Candidates(e.getValue()));
        brokers.add(e.getKey());
      }
      this.byBroker = byBroker;
      this.brokers = new ArrayList<>(brokers);
    }
  }

  /** One database's {@code sys.routes}, active routes only, grouped by matching key. */
  static final class Table implements Serializable {
    private static final long serialVersionUID = 1L;
    final Map<String, Named> named;
    /** M5: routes naming neither service nor broker instance; null when none. */
    final Candidates wildcard;
    /** M4, B2: an active route to the dynamic routing service. */
    final boolean hasBcn;
    /** C5, M3: a set of equal options of this table has more than one ({@link Snapshot#spreads}). */
    final boolean spreads;

    Table(List<Route> routes) {
      Map<String, List<Route>> byService = new LinkedHashMap<>();
      List<Route> wild = new ArrayList<>();
      boolean bcn = false;
      for (Route r : routes) {
        if (r.service != null) {
          byService.computeIfAbsent(r.service, k -> new ArrayList<>()).add(r);
          bcn |= r.service.equals(BCN);
        } else if (r.brokerInstance == null) {
          wild.add(r);
        }
        // A route naming a broker instance but no service is matched by no step (docs/rules.md, M5).
      }
      Map<String, Named> named = new HashMap<>();
      for (Map.Entry<String, List<Route>> e : byService.entrySet()) {
        named.put(e.getKey(), new Named(e.getValue()));
      }
      this.named = named;
      this.wildcard = wild.isEmpty() ? null : new Candidates(wild);
      this.hasBcn = bcn;
      boolean spreads = wildcard != null && wildcard.spreads();
      for (Named n : named.values()) {
        spreads |= n.brokers.size() > 1 || (n.noBroker != null && n.noBroker.spreads());
        for (Candidates c : n.byBroker.values()) {
          spreads |= c.spreads();
        }
      }
      this.spreads = spreads;
    }

    static final Table EMPTY = new Table(Collections.emptyList());
  }

  /** One instance: its catalog and endpoint settings, its routing tables, its mirror roles. */
  public static final class Site implements Serializable {
    private static final long serialVersionUID = 1L;
    final String key;
    /** S5: this instance's own address, normalized (R4). */
    final String address;
    final boolean forwarding;
    /** F5: MESSAGE_FORWARD_SIZE in bytes. */
    final long forwardBytes;
    final List<Database> databases;
    final Map<String, Table> tables;
    /** MI2, MI3: roles keyed by the partner's normalized address. */
    final Map<String, String> mirrors;
    final int routes;
    /** This instance's delayed and dropped topics, or null when the snapshot names no topics. */
    final String delayedTopic;
    final String droppedTopic;
    /** D2: how long a delayed conversation of this instance waits before it is routed again. */
    final long retryMs;

    Site(JsonNode node) {
      this.key = text(node, "key");
      this.address = Text.normalizeAddress(text(node, "address"));
      this.forwarding = node.get("forwarding").asBoolean();
      this.forwardBytes = node.get("forward_size_mb").asLong() * 1_048_576L;
      List<Database> databases = new ArrayList<>();
      for (JsonNode d : node.get("databases")) {
        databases.add(new Database(d));
      }
      this.databases = databases;
      Map<String, List<Route>> byScope = new HashMap<>();
      int count = 0;
      for (JsonNode r : node.get("routes")) {
        if (r.size() != ROUTE_FIELDS.length) {
          String found = r.size() + " values, not " + ROUTE_FIELDS.length;
          throw new IllegalArgumentException("a route of the snapshot has " + found + ": " + r);
        }
        Route route =
            new Route(
                item(r, 0), item(r, 1), item(r, 2), item(r, 3), item(r, 4), item(r, 5));
        byScope.computeIfAbsent(route.scope, k -> new ArrayList<>()).add(route);
        count++;
      }
      Map<String, Table> tables = new HashMap<>();
      for (Map.Entry<String, List<Route>> e : byScope.entrySet()) {
        tables.put(e.getKey(), new Table(e.getValue()));
      }
      this.tables = tables;
      this.routes = count;
      Map<String, String> mirrors = new HashMap<>();
      JsonNode roles = node.get("mirrors");
      if (roles != null) {
        for (Map.Entry<String, JsonNode> e : roles.properties()) {
          mirrors.put(e.getKey(), e.getValue().asText());
        }
      }
      this.mirrors = mirrors;
      JsonNode topics = node.get("topics");
      this.delayedTopic = topics == null ? null : text(topics, "delayed");
      this.droppedTopic = topics == null ? null : text(topics, "dropped");
      JsonNode retry = node.get("retry_ms");
      this.retryMs = retry == null ? 0L : retry.asLong();
    }

    /** The instance's key, as the rows name it. */
    public String key() {
      return key;
    }

    /** D2: how long a delayed conversation of this instance waits before it is routed again. */
    public long retryMs() {
      return retryMs;
    }

    Table table(String scope) {
      Table t = tables.get(scope);
      return t == null ? Table.EMPTY : t;
    }

    /** M6, L4: a broker-enabled database hosts the service. */
    boolean hosts(String service) {
      for (Database d : databases) {
        if (d.enabled && d.services.contains(service)) {
          return true;
        }
      }
      return false;
    }

    /**
     * L2-L4, {@code locate_database}: with a broker instance, the enabled database of that broker
     * instance if it hosts the service; without, the origin database first, then catalog order.
     */
    Database locate(String service, String brokerInstance, String origin) {
      if (brokerInstance != null) {
        String wanted = Text.canonicalGuid(brokerInstance);
        for (Database d : databases) {
          if (d.enabled && d.brokerInstance.equals(wanted) && d.services.contains(service)) {
            return d;
          }
        }
        return null;
      }
      if (origin != null) {
        for (Database d : databases) {
          if (d.enabled && d.name.equals(origin) && d.services.contains(service)) {
            return d;
          }
        }
      }
      for (Database d : databases) {
        if (d.enabled && d.services.contains(service)) {
          return d;
        }
      }
      return null;
    }

    /** S4, {@code reply_shortcut_database}: the enabled database of that broker instance, or null. */
    Database byBrokerInstance(String brokerInstance) {
      String wanted = Text.canonicalGuid(brokerInstance);
      for (Database d : databases) {
        if (d.enabled && d.brokerInstance.equals(wanted)) {
          return d;
        }
      }
      return null;
    }

    /** MI2, MI3, {@code principal_address}: the partner that claims the principal role, or null. */
    String principal(Route route) {
      for (String partner : new String[] {route.address, route.mirrorAddress}) {
        if (partner != null && PRINCIPAL.equals(mirrors.get(Text.normalizeAddress(partner)))) {
          return partner;
        }
      }
      return null;
    }
  }
}
