/*
 * A shim for Debian's jmeter package (2.13), and only for it.
 *
 * Debian 12 ships JMeter 2.13 with XStream 1.4.20. Since 1.4.18 XStream refuses every type
 * it was not told to allow, and JMeter 2.13 predates that and tells it nothing, so Debian's
 * jmeter cannot load any test plan, not even its own templates:
 *
 *   Error in NonGUIDriver com.thoughtworks.xstream.security.ForbiddenClassException:
 *   org.apache.jmeter.save.ScriptWrapper
 *
 * loadtest/jmeter.sh compiles this class and puts it ahead of XStream on the classpath. It
 * replaces XStream's deny-everything fallback with one that allows JMeter's own classes
 * (the elements of a test plan) and still refuses everything else. JMeter 5.x allows its
 * types itself and needs none of this.
 */
package com.thoughtworks.xstream.security;

public class NoTypePermission implements TypePermission {
    public static final TypePermission NONE = new NoTypePermission();

    public boolean allows(Class type) {
        if (type != null) {
            String name = type.getName();
            if (name.startsWith("org.apache.jmeter.") || name.startsWith("org.apache.jorphan.")) {
                return true;
            }
        }
        throw new ForbiddenClassException(type);
    }

    public int hashCode() {
        return 1;
    }

    public boolean equals(Object obj) {
        return obj != null && obj.getClass() == NoTypePermission.class;
    }
}
