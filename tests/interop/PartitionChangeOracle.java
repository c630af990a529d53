// Runs Apache Kafka's own PartitionChangeBuilder on partitions read as JSON lines from stdin and
// prints each result (the PartitionChangeRecord as Kafka's JSON converter writes it, or null for
// no change), one line each. tests/interop/test_kafka_partition_change.py compares the engine's
// builder with it. Run as a single-file program: java -cp <Kafka's jars> PartitionChangeOracle.java

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.common.DirectoryId;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.common.metadata.PartitionChangeRecordJsonConverter;
import org.apache.kafka.controller.PartitionChangeBuilder;
import org.apache.kafka.metadata.LeaderRecoveryState;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.common.MetadataVersion;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

public class PartitionChangeOracle {
    private static int[] ints(JsonNode node) {
        int[] values = new int[node.size()];
        for (int i = 0; i < values.length; i++) values[i] = node.get(i).asInt();
        return values;
    }

    private static List<Integer> list(JsonNode node) {
        List<Integer> values = new ArrayList<>();
        for (JsonNode value : node) values.add(value.asInt());
        return values;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode c = mapper.readTree(line);
            int[] replicas = ints(c.get("replicas"));
            Uuid[] directories = new Uuid[replicas.length];
            Arrays.fill(directories, DirectoryId.MIGRATING);
            PartitionRegistration partition = new PartitionRegistration.Builder()
                .setReplicas(replicas)
                .setDirectories(directories)
                .setIsr(ints(c.get("isr")))
                .setRemovingReplicas(new int[0])
                .setAddingReplicas(new int[0])
                .setElr(ints(c.get("elr")))
                .setLastKnownElr(ints(c.get("lastKnownElr")))
                .setLeader(c.get("leader").asInt())
                .setLeaderRecoveryState(LeaderRecoveryState.of((byte) c.get("leaderRecoveryState").asInt()))
                .setLeaderEpoch(0)
                .setPartitionEpoch(0)
                .build();
            Set<Integer> alive = new HashSet<>(list(c.get("alive")));
            MetadataVersion version = MetadataVersion.fromFeatureLevel((short) c.get("metadataVersion").asInt());
            PartitionChangeBuilder builder = new PartitionChangeBuilder(partition, Uuid.ONE_UUID, 0,
                alive::contains, version, c.get("minIsr").asInt());
            builder.setDefaultDirProvider(brokerId -> DirectoryId.MIGRATING);
            builder.setEligibleLeaderReplicasEnabled(c.get("elrEnabled").asBoolean());
            builder.setUseLastKnownLeaderInBalancedRecovery(c.get("useLastKnownLeader").asBoolean());
            builder.setElection(PartitionChangeBuilder.Election.valueOf(c.get("election").asText()));
            if (c.hasNonNull("targetIsr")) builder.setTargetIsr(list(c.get("targetIsr")));
            if (c.hasNonNull("uncleanShutdownReplicas")) {
                builder.setUncleanShutdownReplicas(list(c.get("uncleanShutdownReplicas")));
            }
            Optional<ApiMessageAndVersion> built = builder.build();
            if (built.isEmpty()) {
                System.out.println("null");
            } else {
                ApiMessageAndVersion record = built.get();
                System.out.println(PartitionChangeRecordJsonConverter.write(
                    (PartitionChangeRecord) record.message(), record.version()).toString());
            }
        }
    }
}
