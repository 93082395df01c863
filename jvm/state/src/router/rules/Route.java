package router.rules;

import java.io.Serializable;
import java.util.Locale;

/**
 * One active route of a routing table (R1), as {@code streaming.rules.model.Route}: a null service
 * or broker instance means any (R2, R3). The broker instance is in canonical form (R3).
 */
public final class Route implements Serializable {
  private static final long serialVersionUID = 1L;

  final String scope;
  final String name;
  final String service;
  final String brokerInstance;
  final String address;
  final String mirrorAddress;
  /** C0: (broker instance or "", service or "", address). */
  final Identity identity;
  final boolean local;
  final boolean transport;

  Route(String scope, String name, String service, String brokerInstance, String address, String mirrorAddress) {
    this.scope = scope;
    this.name = name;
    this.service = service;
    this.brokerInstance = brokerInstance == null ? null : Text.canonicalGuid(brokerInstance);
    this.address = address;
    this.mirrorAddress = mirrorAddress;
    this.identity =
        new Identity(this.brokerInstance == null ? "" : this.brokerInstance, service == null ? "" : service, address);
    String upper = address.toUpperCase(Locale.ROOT);
    this.local = upper.equals("LOCAL");
    this.transport = upper.equals("TRANSPORT");
  }

  /** M6: the route {@code (service, *, LOCAL)} a table behaves as if it held; reported as no route. */
  static Route virtualLocal(String scope, String service) {
    return new Route(scope, null, service, null, "LOCAL", null);
  }

  /** C0's identity of a route, and what a conversation keeps of its choice (K2). */
  public static final class Identity implements Serializable, Comparable<Identity> {
    private static final long serialVersionUID = 1L;
    public final String brokerInstance;
    public final String service;
    public final String address;

    Identity(String brokerInstance, String service, String address) {
      this.brokerInstance = brokerInstance;
      this.service = service;
      this.address = address;
    }

    /**
     * K2: the identity a conversation kept, as its columns carry it (a null broker instance or
     * service stands for none, ""), or null when it kept none (no address).
     */
    public static Identity kept(String brokerInstance, String service, String address) {
      if (address == null) {
        return null;
      }
      return new Identity(brokerInstance == null ? "" : brokerInstance, service == null ? "" : service, address);
    }

    @Override
    public int compareTo(Identity other) {
      int c = Text.compare(brokerInstance, other.brokerInstance);
      if (c == 0) {
        c = Text.compare(service, other.service);
      }
      return c != 0 ? c : Text.compare(address, other.address);
    }

    @Override
    public boolean equals(Object other) {
      if (!(other instanceof Identity)) {
        return false;
      }
      Identity o = (Identity) other;
      return brokerInstance.equals(o.brokerInstance) && service.equals(o.service) && address.equals(o.address);
    }

    @Override
    public int hashCode() {
      return (brokerInstance.hashCode() * 31 + service.hashCode()) * 31 + address.hashCode();
    }
  }
}
