// Reads what kraft_engine.records writes with Apache Kafka's own classes and echoes what Kafka
// makes of it, so test_kafka_interop.py can compare byte for byte. Run in single-file source mode:
//   java -cp '.kafka-jars/<version>/*' KafkaRecordsEcho.java <mode> <file>
// Modes:
//   versions            one line per metadata record type: api key, lowest, highest version, name
//   metadata FILE       FILE holds one hex-encoded framed metadata record per line; for each,
//                       Kafka's re-serialisation (hex), its type name and dump-log JSON, tab-separated
//   batches FILE        FILE holds v2 batches; for each batch, its header fields and whether Kafka's
//                       own builder produces the identical bytes for the same content
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.KRaftVersionRecord;
import org.apache.kafka.common.message.LeaderChangeMessage;
import org.apache.kafka.common.message.SnapshotFooterRecord;
import org.apache.kafka.common.message.SnapshotHeaderRecord;
import org.apache.kafka.common.message.VotersRecord;
import org.apache.kafka.common.metadata.MetadataJsonConverters;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.ControlRecordUtils;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.SimpleRecord;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

public class KafkaRecordsEcho {
    public static void main(String[] args) throws Exception {
        // Names and strings are arbitrary Unicode: never let the platform charset mangle them.
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        switch (args[0]) {
            case "versions" -> {
                for (MetadataRecordType type : MetadataRecordType.values()) {
                    out.println(type.id() + " " + type.lowestSupportedVersion() + " "
                        + type.highestSupportedVersion() + " " + type);
                }
            }
            case "metadata" -> {
                HexFormat hex = HexFormat.of();
                for (String line : Files.readAllLines(Path.of(args[1]))) {
                    byte[] in = hex.parseHex(line);
                    ApiMessageAndVersion record = MetadataRecordSerde.INSTANCE.read(
                        new ByteBufferAccessor(ByteBuffer.wrap(in)), in.length);
                    ObjectSerializationCache cache = new ObjectSerializationCache();
                    ByteBuffer rewritten = ByteBuffer.allocate(MetadataRecordSerde.INSTANCE.recordSize(record, cache));
                    MetadataRecordSerde.INSTANCE.write(record, cache, new ByteBufferAccessor(rewritten));
                    out.println(hex.formatHex(rewritten.array()) + "\t"
                        + MetadataRecordType.fromId(record.message().apiKey()) + "\t"
                        + MetadataJsonConverters.writeJson(record.message(), record.version()));
                }
            }
            case "batches" -> {
                MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(Files.readAllBytes(Path.of(args[1]))));
                for (MutableRecordBatch batch : records.batches()) {
                    batch.ensureValid();
                    ByteBuffer original = ByteBuffer.allocate(batch.sizeInBytes());
                    batch.writeTo(original);
                    MemoryRecords rebuilt = rebuild(batch);
                    out.println(batch.baseOffset() + " " + batch.lastOffset() + " " + batch.partitionLeaderEpoch()
                        + " " + batch.isControlBatch() + " " + batch.isTransactional() + " " + batch.maxTimestamp()
                        + " " + batch.producerId() + " " + batch.countOrNull()
                        + " " + (rebuilt.buffer().equals(original.flip()) ? "SAME" : "DIFFERENT"));
                }
            }
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    private static MemoryRecords rebuild(MutableRecordBatch batch) {
        long base = batch.baseOffset();
        long timestamp = batch.maxTimestamp();
        int epoch = batch.partitionLeaderEpoch();
        ByteBuffer buffer = ByteBuffer.allocate(batch.sizeInBytes() + 64);
        List<SimpleRecord> simple = new ArrayList<>();
        for (Record record : batch) {
            if (!batch.isControlBatch()) {
                simple.add(new SimpleRecord(record.timestamp(), record.key(), record.value()));
                continue;
            }
            // Control batches are rebuilt from the decoded message: one record per batch.
            switch (ControlRecordType.parse(record.key())) {
                case LEADER_CHANGE -> {
                    LeaderChangeMessage m = ControlRecordUtils.deserializeLeaderChangeMessage(record);
                    return MemoryRecords.withLeaderChangeMessage(base, timestamp, epoch, buffer, m);
                }
                case SNAPSHOT_HEADER -> {
                    SnapshotHeaderRecord m = ControlRecordUtils.deserializeSnapshotHeaderRecord(record);
                    return MemoryRecords.withSnapshotHeaderRecord(base, timestamp, epoch, buffer, m);
                }
                case SNAPSHOT_FOOTER -> {
                    SnapshotFooterRecord m = ControlRecordUtils.deserializeSnapshotFooterRecord(record);
                    return MemoryRecords.withSnapshotFooterRecord(base, timestamp, epoch, buffer, m);
                }
                case KRAFT_VERSION -> {
                    KRaftVersionRecord m = ControlRecordUtils.deserializeKRaftVersionRecord(record);
                    return MemoryRecords.withKRaftVersionRecord(base, timestamp, epoch, buffer, m);
                }
                case KRAFT_VOTERS -> {
                    VotersRecord m = ControlRecordUtils.deserializeVotersRecord(record);
                    return MemoryRecords.withVotersRecord(base, timestamp, epoch, buffer, m);
                }
                default -> throw new IllegalStateException("unexpected control record");
            }
        }
        return MemoryRecords.withRecords(RecordBatch.MAGIC_VALUE_V2, base, Compression.NONE, TimestampType.CREATE_TIME,
            RecordBatch.NO_PRODUCER_ID, RecordBatch.NO_PRODUCER_EPOCH, RecordBatch.NO_SEQUENCE, epoch, false,
            simple.toArray(new SimpleRecord[0]));
    }
}
