import { checkUserDataSize, decodeUserData, encodeUserData, renderInstallScript, renderStartLogic, renderUserData, USER_DATA_LIMIT_BYTES, type UserDataOptions } from './user-data';

/**
 * The runner instances' boot script for authors of their own user data or launch templates,
 * in every CDK language (jsii carries classes, not free functions): render the script,
 * check its size, and encode it the way the launch templates carry it. TypeScript code may
 * call the functions of `user-data.ts` directly; these are the same functions.
 */
export class RunnerUserData {
  /**
   * EC2's limit on user data, in bytes, measured on the raw (here gzip-compressed) bytes
   * before base64 encoding.
   */
  public static readonly LIMIT_BYTES: number = USER_DATA_LIMIT_BYTES;

  /**
   * The user data of a pool's instances as text: the start logic, run by cloud-init on the
   * first boot. Throws when the compressed form would not fit EC2's limit or the text
   * looks like it holds a secret.
   */
  public static render(options: UserDataOptions): string {
    return renderUserData(options);
  }

  /**
   * The start logic alone, from its begin marker line to its end marker line: the block a
   * custom user data embeds verbatim (see docs/boot-modes.md).
   */
  public static renderStartLogic(options: UserDataOptions): string {
    return renderStartLogic(options);
  }

  /**
   * The install step alone, as a standalone script: installs the runner user and the pinned
   * runner release (`runnerPackage`) when missing, refusing a download whose SHA-256 differs.
   * The start logic embeds the same step; an image pipeline runs this one.
   */
  public static renderInstallScript(options: UserDataOptions): string {
    return renderInstallScript(options);
  }

  /**
   * The compressed size of a user data text in bytes; throws, naming both sizes and what to
   * do, when it exceeds `LIMIT_BYTES`.
   */
  public static checkSize(userData: string): number {
    return checkUserDataSize(userData);
  }

  /** A launch template's `UserData` value: base64 of the gzip-compressed text. */
  public static encode(userData: string): string {
    return encodeUserData(userData);
  }

  /** The text of a launch template's `UserData` (base64), gunzipped when it is gzip. */
  public static decode(base64: string): string {
    return decodeUserData(base64);
  }

  private constructor() {}
}
