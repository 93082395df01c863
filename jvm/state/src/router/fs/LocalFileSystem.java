package router.fs;

import java.io.IOException;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system ({@code file:}), with checksums as before, that sets a file's
 * permissions through {@code java.nio} instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library (which no Maven artifact ships), {@link RawLocalFileSystem}
 * runs {@code chmod} in a new process for every file it creates. A micro-batch writes a dozen files
 * to its checkpoint and state store (offsets, commits, changelogs, their checksums): each one was a
 * process started from the driver's batch thread. Set as {@code fs.file.impl} by
 * {@code streaming.spark.session.local_conf}; a permission Java cannot express (the sticky bit)
 * and a file system without POSIX permissions still go to Hadoop's own code.
 */
public final class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {

  public LocalFileSystem() {
    super(new Raw());
  }

  /** The raw (checksum-less) file system under the checksums. */
  static final class Raw extends RawLocalFileSystem {
    private static final boolean POSIX =
        FileSystems.getDefault().supportedFileAttributeViews().contains("posix");

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (!POSIX || permission.getStickyBit() || NativeIO.isAvailable()) {
        super.setPermission(p, permission);
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
    }
  }

  /** The POSIX permission bits of a Hadoop permission (the sticky bit aside). */
  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(
      Set<PosixFilePermission> bits,
      FsAction action,
      PosixFilePermission read,
      PosixFilePermission write,
      PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
