package router.hdfs;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A real HDFS for the tests: Hadoop's MiniDFSCluster, one namenode and one datanode on 127.0.0.1,
 * in a JVM of its own (tests/integration/hdfs.py starts it).
 *
 * <p>{@code java router.hdfs.MiniHdfs STORAGE_DIR PORT READY_FILE}: the cluster keeps its blocks
 * and the namenode's image under STORAGE_DIR (formatted anew), its namenode listens on PORT (0: a
 * free one), and once the datanode has registered, the namenode's URL ({@code hdfs://127.0.0.1:N})
 * is written to READY_FILE (through a rename, so a reader sees all of it or nothing). The cluster
 * runs until standard input closes or the process is ended (SIGTERM, SIGINT), then shuts down.
 */
public final class MiniHdfs {

  private MiniHdfs() {}

  public static void main(String[] args) throws IOException, InterruptedException {
    if (args.length != 3) {
      System.err.println("usage: router.hdfs.MiniHdfs STORAGE_DIR PORT READY_FILE");
      System.exit(2);
    }
    Path storage = Path.of(args[0]).toAbsolutePath();
    int port = Integer.parseInt(args[1]);
    Path ready = Path.of(args[2]).toAbsolutePath();

    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, storage.toString());
    // Every server of the cluster on loopback only: the RPC, HTTP and data transfer ports.
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.set("dfs.namenode.https-address", "127.0.0.1:0");
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf)
            .numDataNodes(1)
            .nameNodePort(port)
            .nameNodeHttpPort(0)
            .format(true)
            .build();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown, "mini-hdfs-shutdown"));
    cluster.waitActive();

    String url = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
    Path partial = ready.resolveSibling(ready.getFileName() + ".tmp");
    Files.writeString(partial, url + "\n", StandardCharsets.UTF_8);
    Files.move(partial, ready, StandardCopyOption.ATOMIC_MOVE);

    // Until the test closes our standard input (or ends the process): the hook shuts down.
    while (System.in.read() != -1) {
      // a test has nothing to say to the cluster; what it writes is read and ignored
    }
    System.exit(0);
  }
}
