import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

/**
 * A broker metrics reporter that receives client telemetry (KIP-714) and writes one line
 * per accepted push to telemetry-NODE.tsv in the folder of the broker setting
 * telemetry.log.dir: client id, client instance id, terminating, push interval, content
 * type and the pushed metric names. A broker advertises the telemetry requests to clients
 * only when such a receiver is configured, so without it no client ever pushes; the test
 * counts the lines instead of waiting on time.
 */
public class TelemetryLog implements MetricsReporter, ClientTelemetryExporterProvider {
    private Path file;

    @Override
    public void configure(Map<String, ?> configs) {
        file = Paths.get(String.valueOf(configs.get("telemetry.log.dir")),
                         "telemetry-" + configs.get("node.id") + ".tsv");
    }

    @Override
    public void init(List<KafkaMetric> metrics) { }

    @Override
    public void metricChange(KafkaMetric metric) { }

    @Override
    public void metricRemoval(KafkaMetric metric) { }

    @Override
    public void close() { }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::write;
    }

    private synchronized void write(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        String names;
        try {
            TreeSet<String> seen = new TreeSet<>();
            MetricsData data = MetricsData.parseFrom(payload.data().duplicate());
            for (ResourceMetrics resource : data.getResourceMetricsList()) {
                for (ScopeMetrics scope : resource.getScopeMetricsList()) {
                    for (Metric metric : scope.getMetricsList()) {
                        seen.add(metric.getName());
                    }
                }
            }
            names = String.join(",", seen);
        } catch (Exception e) {
            names = "!unreadable " + e;
        }
        String line = String.join("\t", context.authorizableRequestContext().clientId(),
                String.valueOf(payload.clientInstanceId()), String.valueOf(payload.isTerminating()),
                String.valueOf(context.pushIntervalMs()), payload.contentType(), names) + "\n";
        try {
            Files.write(file, line.getBytes(StandardCharsets.UTF_8),
                        StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }
}
