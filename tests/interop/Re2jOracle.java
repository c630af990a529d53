// Runs Apache Kafka 4.1's own regex check on patterns read as JSON strings, one a line, from stdin,
// and prints for each a JSON object: "printed", what kafka-consumer-groups --validate-regex prints
// (ConsumerGroupCommand.validateRegex, called as the tool calls it), and "message", RE2J's
// PatternSyntaxException message (null when the pattern compiles), or "thrown", the class of any
// other throwable. tests/interop/test_kafka_validate_regex.py compares kraftwerk's checker with it.
// Run as a single-file program: java -cp <Kafka's jars> Re2jOracle.java

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import com.google.re2j.Pattern;
import com.google.re2j.PatternSyntaxException;

import org.apache.kafka.tools.consumer.group.ConsumerGroupCommand;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;

public class Re2jOracle {
    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        Method validateRegex = ConsumerGroupCommand.class.getDeclaredMethod("validateRegex", String.class);
        validateRegex.setAccessible(true);
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String pattern = json.readValue(line, String.class);
            ObjectNode answer = json.createObjectNode();
            ByteArrayOutputStream printed = new ByteArrayOutputStream();
            PrintStream stdout = System.out;
            System.setOut(new PrintStream(printed, true, StandardCharsets.UTF_8));
            try {
                validateRegex.invoke(null, pattern);
                answer.put("printed", printed.toString(StandardCharsets.UTF_8));
                Pattern.compile(pattern);
                answer.putNull("message");
            } catch (PatternSyntaxException e) {
                answer.put("message", e.getMessage());
            } catch (Throwable e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                answer.put("thrown", cause.getClass().getName());
            } finally {
                System.setOut(stdout);
            }
            out.println(json.writeValueAsString(answer));
        }
    }
}
